package dev.inpath.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** What the driver asks the servers while planning: the schema and the page ranges. */
final class Catalog {
  private Catalog() {}

  /** One part of the table: a server, the rows of a page range, their predicate (or none). */
  static final class Part implements Serializable {
    private static final long serialVersionUID = 1L;
    final String uri;
    final String host;
    final String predicate;
    final long rows;

    Part(String uri, String host, String predicate, long rows) {
      this.uri = uri;
      this.host = host;
      this.predicate = predicate;
      this.rows = rows;
    }
  }

  /**
   * The table's schema, the same on every server or refused: the message names both servers
   * and the first difference. Nullability may differ (a server holding no rows of a table);
   * a column is nullable when it is on any server.
   */
  static StructType schema(Options o) {
    Schema first = null;
    String firstUri = null;
    boolean[] nullable = null;
    try (RootAllocator a = new RootAllocator()) {
      for (String uri : o.uris) {
        Schema s;
        try (Server server = new Server(uri, o.token, o.caPem, a)) {
          s = server.tableSchema(o.table);
        }
        if (first == null) {
          first = s;
          firstUri = uri;
          nullable = new boolean[s.getFields().size()];
        } else {
          String diff = difference(first, s);
          if (diff != null) {
            throw new InpathException("inpath: the table '" + o.table
                + "' has different schemas on " + firstUri + " and " + uri + ": " + diff
                + "; the servers of one table must hold the same columns", null);
          }
        }
        for (int i = 0; i < nullable.length; i++) {
          nullable[i] |= s.getFields().get(i).isNullable();
        }
      }
    }
    StructType spark = Types.spark(first, o.table, firstUri);
    StructField[] f = spark.fields();
    for (int i = 0; i < f.length; i++) {
      f[i] = new StructField(f[i].name(), f[i].dataType(), nullable[i], f[i].metadata());
    }
    return new StructType(f);
  }

  private static String difference(Schema a, Schema b) {
    List<Field> fa = a.getFields();
    List<Field> fb = b.getFields();
    for (int i = 0; i < Math.max(fa.size(), fb.size()); i++) {
      if (i >= fa.size()) {
        return "the second has an extra column '" + fb.get(i).getName() + "'";
      }
      if (i >= fb.size()) {
        return "the second lacks the column '" + fa.get(i).getName() + "'";
      }
      Field x = fa.get(i);
      Field y = fb.get(i);
      if (!x.getName().equals(y.getName())) {
        return "column " + (i + 1) + " is '" + x.getName() + "' on the first and '"
            + y.getName() + "' on the second";
      }
      if (!x.getType().equals(y.getType())) {
        return "column '" + x.getName() + "' is " + x.getType() + " on the first and "
            + y.getType() + " on the second";
      }
    }
    return null;
  }

  /** Every server's page ranges of the table, from its {@code inpath.splits} action. */
  static List<Part> parts(Options o) {
    List<Part> out = new ArrayList<>();
    try (RootAllocator a = new RootAllocator()) {
      for (String uri : o.uris) {
        try (Server server = new Server(uri, o.token, o.caPem, a)) {
          JsonNode j = server.splits(o.table, o.partsPerServer);
          try {
            parse(uri, server.host, j, out);
          } catch (RuntimeException e) {
            if (e instanceof InpathException) {
              throw e;
            }
            throw new InpathException("inpath: server " + uri + ": the answer of inpath.splits for '"
                + o.table + "' is not understood (" + e + "): " + j, e);
          }
        }
      }
    }
    return out;
  }

  private static void parse(String uri, String host, JsonNode j, List<Part> out) {
    JsonNode col = j.get("column");
    JsonNode splits = j.get("splits");
    if (col == null || col.isNull()) {
      out.add(new Part(uri, host, null, j.path("rows").asLong(0)));
      return;
    }
    String c = Sql.ident(col.asText());
    String type = j.path("type").asText();
    if (!type.equals("int") && !type.equals("date")) {
      throw new IllegalArgumentException("split type '" + type + "' is neither int nor date");
    }
    for (JsonNode s : splits) {
      List<String> p = new ArrayList<>();
      if (s.hasNonNull("lo")) {
        p.add(c + " >= " + bound(s.get("lo"), type));
      }
      if (s.hasNonNull("hi")) {
        p.add(c + " < " + bound(s.get("hi"), type));
      }
      String pred = p.isEmpty() ? c + " IS NOT NULL" : String.join(" AND ", p);
      out.add(new Part(uri, host, "(" + pred + ")", s.path("rows").asLong(0)));
    }
    if (j.path("nullable").asBoolean(false)) {
      out.add(new Part(uri, host, "(" + c + " IS NULL)", 0));
    }
  }

  private static String bound(JsonNode v, String type) {
    if (type.equals("int")) {
      if (!v.canConvertToLong()) {
        throw new IllegalArgumentException("bound " + v + " is not an integer");
      }
      return Long.toString(v.asLong());
    }
    return "DATE '" + LocalDate.parse(v.asText()) + "'";
  }
}
