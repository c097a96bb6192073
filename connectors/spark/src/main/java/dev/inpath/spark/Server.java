package dev.inpath.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.protobuf.CodedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URI;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.CallStatus;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Result;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * One inpath Flight SQL server: a client with the token and the CA, and the three calls the
 * connector makes (GetTables with schemas, the {@code inpath.splits} action, a statement).
 *
 * <p>Flight SQL's two commands are encoded here by hand (a protobuf {@code Any} around one or
 * two fields): Maven Central serves Arrow's flight-core 19.0.0 but not flight-sql 19.0.0, and
 * two commands do not justify a second Arrow version. Every failure names the server.
 */
final class Server implements AutoCloseable {
  private static final String SQL_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql.";
  private static final ObjectMapper JSON = new ObjectMapper();

  final String uri;
  final String host;
  private final FlightClient client;
  private final CallOption[] options;

  Server(String uri, String token, String caPem, BufferAllocator allocator) {
    this.uri = uri;
    URI parsed;
    try {
      parsed = new URI(uri);
    } catch (Exception e) {
      throw new IllegalArgumentException("inpath: option uri: '" + uri + "' is not a URI", e);
    }
    String scheme = parsed.getScheme();
    if (parsed.getHost() == null || parsed.getPort() < 0
        || !("grpc".equals(scheme) || "grpc+tcp".equals(scheme) || "grpc+tls".equals(scheme))) {
      throw new IllegalArgumentException("inpath: option uri: '" + uri
          + "' must be grpc://HOST:PORT, or grpc+tls://HOST:PORT with the option tls_ca");
    }
    this.host = parsed.getHost();
    boolean tls = "grpc+tls".equals(scheme);
    if (tls && caPem == null) {
      throw new IllegalArgumentException("inpath: " + uri + " is grpc+tls:// but the option tls_ca"
          + " (the PEM file of the CA that signed the server's certificate) is not set");
    }
    FlightClient.Builder b = FlightClient.builder().allocator(allocator)
        .location(tls ? Location.forGrpcTls(host, parsed.getPort())
            : Location.forGrpcInsecure(host, parsed.getPort()));
    if (tls) {
      b.useTls().trustedCertificates(new ByteArrayInputStream(caPem.getBytes(StandardCharsets.UTF_8)));
    }
    this.client = b.build();
    if (token != null) {
      FlightCallHeaders h = new FlightCallHeaders();
      h.insert("authorization", "Bearer " + token);
      this.options = new CallOption[] {new HeaderCallOption(h)};
    } else {
      this.options = new CallOption[0];
    }
  }

  /** The error a Spark task or the planner shows: the server, what was being done, why. */
  RuntimeException fail(String doing, Throwable e) {
    String why = e.getMessage();
    if (e instanceof FlightRuntimeException) {
      CallStatus s = ((FlightRuntimeException) e).status();
      FlightStatusCode c = s.code();
      why = c + ": " + s.description();
      if (c == FlightStatusCode.UNAUTHENTICATED || c == FlightStatusCode.UNAUTHORIZED) {
        why = "the server refused the credentials (" + why + "); check the option token";
      } else if (c == FlightStatusCode.UNAVAILABLE) {
        why = "the server is unreachable or went away (" + why + ")";
      }
    }
    return new InpathException("inpath: server " + uri + ": " + doing + ": " + why, e);
  }

  private static byte[] command(String name, byte[] body) {
    return Any.newBuilder().setTypeUrl(SQL_PREFIX + name).setValue(ByteString.copyFrom(body))
        .build().toByteArray();
  }

  /** The table's Arrow schema, from GetTables with include_schema; fails naming the table. */
  Schema tableSchema(String table) {
    List<byte[]> found = new ArrayList<>();
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      CodedOutputStream out = CodedOutputStream.newInstance(bytes);
      out.writeString(3, table); // table_name_filter_pattern
      out.writeBool(5, true); // include_schema
      out.flush();
      FlightInfo info = client.getInfo(
          FlightDescriptor.command(command("CommandGetTables", bytes.toByteArray())), options);
      for (FlightEndpoint ep : info.getEndpoints()) {
        try (FlightStream s = client.getStream(ep.getTicket(), options)) {
          while (s.next()) {
            VectorSchemaRoot root = s.getRoot();
            VarCharVector names = (VarCharVector) root.getVector("table_name");
            VarBinaryVector schemas = (VarBinaryVector) root.getVector("table_schema");
            for (int i = 0; i < root.getRowCount(); i++) {
              // The pattern is a LIKE pattern: keep the exact name only.
              if (table.equals(new String(names.get(i), StandardCharsets.UTF_8))) {
                found.add(schemas.get(i));
              }
            }
          }
        }
      }
    } catch (InpathException e) {
      throw e;
    } catch (Exception e) {
      throw fail("listing the table '" + table + "' (Flight SQL GetTables)", e);
    }
    if (found.isEmpty()) {
      throw new InpathException("inpath: server " + uri + " does not hold the table '" + table
          + "' (Flight SQL GetTables found no such table)", null);
    }
    try {
      return MessageSerializer.deserializeSchema(
          new ReadChannel(Channels.newChannel(new ByteArrayInputStream(found.get(0)))));
    } catch (IOException e) {
      throw fail("reading the schema of '" + table + "' from GetTables", e);
    }
  }

  /** The {@code inpath.splits} action's answer for the table, in {@code parts} page ranges. */
  JsonNode splits(String table, int parts) {
    try {
      byte[] body = JSON.writeValueAsBytes(
          JSON.createObjectNode().put("table", table).put("parts", parts));
      Iterator<Result> it = client.doAction(new Action("inpath.splits", body), options);
      JsonNode answer = null;
      while (it.hasNext()) {
        byte[] r = it.next().getBody();
        if (answer == null) {
          answer = JSON.readTree(r);
        }
      }
      if (answer == null) {
        throw new IOException("the action returned no result");
      }
      return answer;
    } catch (InpathException e) {
      throw e;
    } catch (Exception e) {
      throw fail("asking for the page ranges of '" + table + "' (action inpath.splits)", e);
    }
  }

  /** Runs a statement: its FlightInfo (whose endpoints' tickets give the result's streams). */
  FlightInfo execute(String sql) {
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      CodedOutputStream out = CodedOutputStream.newInstance(bytes);
      out.writeString(1, sql); // CommandStatementQuery.query
      out.flush();
      return client.getInfo(
          FlightDescriptor.command(command("CommandStatementQuery", bytes.toByteArray())), options);
    } catch (Exception e) {
      throw fail("running " + sql, e);
    }
  }

  FlightStream stream(FlightEndpoint ep) {
    try {
      return client.getStream(ep.getTicket(), options);
    } catch (Exception e) {
      throw fail("fetching a result stream", e);
    }
  }

  @Override
  public void close() {
    try {
      client.close();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
