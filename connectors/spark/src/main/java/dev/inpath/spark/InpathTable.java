package dev.inpath.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A table served by one or more inpath servers, read in batches. */
final class InpathTable implements SupportsRead {
  private final Options options;
  private final StructType schema;

  InpathTable(Options options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public String name() {
    return "inpath." + options.table;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
    return new InpathScanBuilder(options, schema);
  }
}
