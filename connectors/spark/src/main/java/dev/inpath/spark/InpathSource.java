package dev.inpath.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("inpath").option("uri", "grpc://h1:p1,grpc://h2:p2")
 * .option("table", "lineitem").load()}, or {@code CREATE TABLE t USING inpath OPTIONS (uri
 * '...', table 'lineitem')}: a table of inpath servers (each holding some of its pages) read
 * over Arrow Flight SQL, with columns, filters, aggregates, limits and top-N pushed to them.
 */
public final class InpathSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "inpath";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return Catalog.schema(Options.from(options.asCaseSensitiveMap()));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new InpathTable(Options.from(properties), schema);
  }
}
