package dev.inpath.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.OptionalLong;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The planned scan: one statement per page range of every server. */
final class InpathScan implements Scan, Batch, SupportsReportStatistics {
  private final Options options;
  private final StructType readSchema;
  private final String select;
  private final List<String> where;
  private final List<String> groupBy;
  private final String orderBy;
  private final int limit;
  private final List<Catalog.Part> parts;
  private final String filters;
  private final String aggregates;

  InpathScan(Options options, StructType readSchema, String select, List<String> where,
      List<String> groupBy, String orderBy, int limit, List<Catalog.Part> parts, String filters,
      String aggregates) {
    this.options = options;
    this.readSchema = readSchema;
    this.select = select;
    this.where = where;
    this.groupBy = groupBy;
    this.orderBy = orderBy;
    this.limit = limit;
    this.parts = parts;
    this.filters = filters;
    this.aggregates = aggregates;
  }

  /** The statement of one part: the pushed work, and the part's page range. */
  String statement(Catalog.Part part) {
    StringBuilder s = new StringBuilder("SELECT ").append(select).append(" FROM ")
        .append(Sql.ident(options.table));
    List<String> w = new ArrayList<>(where);
    if (part.predicate != null) {
      w.add(part.predicate);
    }
    if (!w.isEmpty()) {
      s.append(" WHERE ").append(String.join(" AND ", w));
    }
    if (groupBy != null && !groupBy.isEmpty()) {
      s.append(" GROUP BY ").append(String.join(", ", groupBy));
    }
    if (orderBy != null) {
      s.append(" ORDER BY ").append(orderBy);
    }
    if (limit >= 0) {
      s.append(" LIMIT ").append(limit);
    }
    return s.toString();
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    StringBuilder d = new StringBuilder("inpath ").append(options.table).append(" ")
        .append(options.uris).append(", PushedFilters: ").append(filters);
    if (aggregates != null) {
      d.append(", PushedAggregates: ").append(aggregates);
    }
    if (orderBy != null) {
      d.append(", PushedTopN: ORDER BY ").append(orderBy).append(" LIMIT ").append(limit);
    } else if (limit >= 0) {
      d.append(", PushedLimit: ").append(limit);
    }
    d.append(", Partitions: ").append(parts.size());
    if (!parts.isEmpty()) {
      d.append(", SQL[0]: ").append(statement(parts.get(0)));
    }
    return d.toString();
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    InputPartition[] out = new InputPartition[parts.size()];
    for (int i = 0; i < out.length; i++) {
      Catalog.Part p = parts.get(i);
      out[i] = new InpathPartition(i, p.uri, p.host, statement(p));
    }
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new InpathReaderFactory(options, readSchema);
  }

  @Override
  public Statistics estimateStatistics() {
    long rows = 0;
    for (Catalog.Part p : parts) {
      rows += p.rows;
    }
    final boolean known = aggregates == null && limit < 0 && rows > 0;
    long width = 8;
    for (StructField f : readSchema.fields()) {
      width += f.dataType().defaultSize();
    }
    final long n = rows;
    final long bytes = rows * width;
    return new Statistics() {
      @Override
      public OptionalLong sizeInBytes() {
        return known ? OptionalLong.of(bytes) : OptionalLong.empty();
      }

      @Override
      public OptionalLong numRows() {
        return known ? OptionalLong.of(n) : OptionalLong.empty();
      }
    };
  }
}
