package dev.inpath.spark;

import java.util.List;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Runs one partition's statement and hands Spark the result's record batches as they arrive
 * (one batch in memory at a time, never the whole result). A failure names the server, the
 * table and the partition; Spark's task retry runs the statement again.
 */
final class InpathReader implements PartitionReader<ColumnarBatch> {
  private final Options options;
  private final StructType schema;
  private final InpathPartition part;
  private BufferAllocator allocator;
  private Server server;
  private List<FlightEndpoint> endpoints;
  private int nextEndpoint;
  private FlightStream stream;
  private ColumnarBatch batch;

  InpathReader(Options options, StructType schema, InpathPartition part) {
    this.options = options;
    this.schema = schema;
    this.part = part;
  }

  private String where() {
    return "reading partition " + part.index + " of the table '" + options.table + "'";
  }

  @Override
  public boolean next() {
    try {
      if (server == null) {
        allocator = new RootAllocator(Long.MAX_VALUE);
        server = new Server(part.uri, options.token, options.caPem, allocator);
        endpoints = server.execute(part.sql).getEndpoints();
      }
      while (true) {
        if (stream != null && stream.next()) {
          batch = wrap(stream.getRoot());
          return true;
        }
        if (stream != null) {
          stream.close();
          stream = null;
        }
        if (nextEndpoint >= endpoints.size()) {
          return false;
        }
        stream = server.stream(endpoints.get(nextEndpoint++));
        check(stream.getSchema().getFields());
      }
    } catch (InpathException e) {
      throw new InpathException(e.getMessage() + " (" + where() + ")", e.getCause());
    } catch (Exception e) {
      throw server == null ? new InpathException("inpath: server " + part.uri + ": " + where()
          + ": " + e, e) : server.fail(where(), e);
    }
  }

  /** The stream's columns must be those the scan declared: else Spark would misread them. */
  private void check(List<Field> fields) {
    if (fields.size() != schema.size() && !(schema.size() == 0 && fields.size() == 1)) {
      throw new InpathException("inpath: server " + part.uri + " answered " + fields.size()
          + " columns where " + schema.size() + " were asked for, to: " + part.sql, null);
    }
    for (int i = 0; i < schema.size(); i++) {
      DataType got = Types.spark(fields.get(i).getType());
      DataType want = schema.fields()[i].dataType();
      if (got == null || !got.equals(want)) {
        throw new InpathException("inpath: server " + part.uri + " answered column "
            + (i + 1) + " ('" + fields.get(i).getName() + "') as " + fields.get(i).getType()
            + " where Spark expects " + want.simpleString() + ", to: " + part.sql, null);
      }
    }
  }

  private ColumnarBatch wrap(VectorSchemaRoot root) {
    ColumnVector[] cols = new ColumnVector[schema.size()];
    List<FieldVector> vectors = root.getFieldVectors();
    for (int i = 0; i < cols.length; i++) {
      cols[i] = new ArrowColumnVector(vectors.get(i));
    }
    return new ColumnarBatch(cols, root.getRowCount());
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() {
    // The batch's vectors belong to the stream's root: closing the stream frees them.
    try {
      if (stream != null) {
        stream.close();
      }
    } catch (Exception e) {
      // The task's result does not depend on it; the allocator's close reports leaks.
    }
    stream = null;
    if (server != null) {
      server.close();
      server = null;
    }
    if (allocator != null) {
      try {
        allocator.close();
      } catch (IllegalStateException e) {
        // Buffers still held after a stream broke off: they go with the allocator; the
        // task's own error (if any) is the one to report, not this.
      }
      allocator = null;
    }
  }
}
