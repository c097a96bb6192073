package dev.inpath.spark;

import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The connector's options, read once on the driver. The CA file's contents travel with the
 * partitions (executors need not see the driver's files); so does the token.
 */
final class Options implements Serializable {
  private static final long serialVersionUID = 1L;

  final List<String> uris;
  final String table;
  final String token;
  final String caPem;
  final int partsPerServer;

  private Options(List<String> uris, String table, String token, String caPem, int parts) {
    this.uris = uris;
    this.table = table;
    this.token = token;
    this.caPem = caPem;
    this.partsPerServer = parts;
  }

  static Options from(Map<String, String> raw) {
    Map<String, String> o = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    o.putAll(raw);
    String uri = o.get("uri");
    if (uri == null || uri.trim().isEmpty()) {
      throw new IllegalArgumentException("inpath: the option uri is required:"
          + " grpc://HOST:PORT of each server holding the table, comma-separated");
    }
    List<String> uris = new ArrayList<>();
    for (String u : uri.split(",")) {
      if (!u.trim().isEmpty()) {
        uris.add(u.trim());
      }
    }
    String table = o.get("table");
    if (table == null || table.trim().isEmpty()) {
      throw new IllegalArgumentException("inpath: the option table is required (a table name)");
    }
    String token = o.get("token");
    String caPem = null;
    String ca = o.get("tls_ca");
    if (ca != null) {
      try {
        caPem = new String(Files.readAllBytes(Paths.get(ca)), StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw new IllegalArgumentException("inpath: option tls_ca: cannot read '" + ca + "': " + e, e);
      }
    }
    int parts = 2;
    String p = o.get("partitions_per_server");
    if (p != null) {
      try {
        parts = Integer.parseInt(p.trim());
      } catch (NumberFormatException e) {
        parts = -1;
      }
      if (parts < 1 || parts > 4096) {
        throw new IllegalArgumentException(
            "inpath: option partitions_per_server: '" + p + "' is not a whole number in 1..4096");
      }
    }
    return new Options(Collections.unmodifiableList(uris), table.trim(), token, caPem, parts);
  }
}
