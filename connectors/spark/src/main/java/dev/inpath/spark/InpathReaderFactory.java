package dev.inpath.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Columnar readers only: Arrow batches from Flight become Spark's batches without a copy. */
final class InpathReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  private final Options options;
  private final StructType schema;

  InpathReaderFactory(Options options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new InpathReader(options, schema, (InpathPartition) partition);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("inpath: the connector reads columnar batches only");
  }
}
