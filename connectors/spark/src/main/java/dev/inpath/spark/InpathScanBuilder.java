package dev.inpath.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Avg;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownLimit;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownTopN;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * What Spark pushes, kept as the pieces of one SQL statement; each partition's statement adds
 * its page range's predicate. Only what translates exactly is accepted (see {@link Sql}).
 */
final class InpathScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns,
    SupportsPushDownV2Filters, SupportsPushDownAggregates, SupportsPushDownLimit,
    SupportsPushDownTopN {
  private final Options options;
  private final StructType schema;
  private final Sql sql;
  private StructType required;
  private final List<String> where = new ArrayList<>();
  private Predicate[] pushed = new Predicate[0];
  // Set when an aggregate is pushed.
  private StructType aggSchema;
  private List<String> select;
  private List<String> groupBy;
  private String aggDescription;
  private String orderBy;
  private int limit = -1;
  private List<Catalog.Part> parts;

  InpathScanBuilder(Options options, StructType schema) {
    this.options = options;
    this.schema = schema;
    this.sql = new Sql(schema);
    this.required = schema;
  }

  private List<Catalog.Part> parts() {
    if (parts == null) {
      parts = Catalog.parts(options);
    }
    return parts;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    List<StructField> keep = new ArrayList<>();
    for (StructField f : schema.fields()) {
      for (String n : requiredSchema.fieldNames()) {
        if (n.equals(f.name())) {
          keep.add(f);
        }
      }
    }
    this.required = new StructType(keep.toArray(new StructField[0]));
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] predicates) {
    List<Predicate> rest = new ArrayList<>();
    List<Predicate> done = new ArrayList<>();
    for (Predicate p : predicates) {
      String s = sql.predicate(p);
      if (s == null) {
        rest.add(p);
      } else {
        where.add(s);
        done.add(p);
      }
    }
    pushed = done.toArray(new Predicate[0]);
    return rest.toArray(new Predicate[0]);
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushed;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    // One partition computes the final values; otherwise Spark merges the partial ones (and
    // splits AVG into SUM and COUNT first). AVG of decimals is not pushed at all: Spark does
    // its rounding.
    if (parts().size() != 1) {
      return false;
    }
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      if (f instanceof Avg && sql.aggregate(f, true) == null) {
        return false;
      }
    }
    return true;
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    boolean complete = parts().size() == 1;
    List<String> sel = new ArrayList<>();
    List<String> groups = new ArrayList<>();
    List<StructField> fields = new ArrayList<>();
    StringBuilder desc = new StringBuilder("[");
    int i = 0;
    for (Expression g : aggregation.groupByExpressions()) {
      Sql.Typed t = sql.expr(g);
      if (t == null) {
        return false;
      }
      groups.add(t.sql);
      sel.add(t.sql + " AS " + Sql.ident("g" + i));
      fields.add(new StructField("g" + i, t.type, true, Metadata.empty()));
      i++;
    }
    i = 0;
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      Sql.Typed t = sql.aggregate(f, complete);
      if (t == null) {
        return false;
      }
      sel.add(t.sql + " AS " + Sql.ident("a" + i));
      fields.add(new StructField("a" + i, t.type, true, Metadata.empty()));
      desc.append(i > 0 ? ", " : "").append(f.describe());
      i++;
    }
    desc.append("], PushedGroupBy: [");
    for (int k = 0; k < groups.size(); k++) {
      desc.append(k > 0 ? ", " : "").append(aggregation.groupByExpressions()[k].describe());
    }
    desc.append("]");
    this.select = sel;
    this.groupBy = groups;
    this.aggSchema = new StructType(fields.toArray(new StructField[0]));
    this.aggDescription = desc.toString();
    return true;
  }

  @Override
  public boolean pushLimit(int n) {
    if (aggSchema != null && parts().size() != 1) {
      return false;
    }
    limit = limit < 0 ? n : Math.min(limit, n);
    return true;
  }

  @Override
  public boolean pushTopN(SortOrder[] orders, int n) {
    if (aggSchema != null) {
      return false; // the orders name the aggregate's output, not the table's columns
    }
    List<String> items = new ArrayList<>();
    for (SortOrder o : orders) {
      String s = sql.order(o);
      if (s == null) {
        return false;
      }
      items.add(s);
    }
    orderBy = String.join(", ", items);
    limit = n;
    return true;
  }

  @Override
  public boolean isPartiallyPushed() {
    return true; // each partition's top N; Spark takes the top N of those
  }

  @Override
  public Scan build() {
    List<String> sel = select;
    StructType out = aggSchema;
    if (out == null) {
      out = required;
      sel = new ArrayList<>();
      for (StructField f : required.fields()) {
        sel.add(Sql.ident(f.name()));
      }
      if (sel.isEmpty()) {
        sel.add("1 AS \"one\""); // only the row count is needed (Spark's count(*))
      }
    }
    StringBuilder filters = new StringBuilder("[");
    for (int i = 0; i < pushed.length; i++) {
      filters.append(i > 0 ? ", " : "").append(pushed[i].describe());
    }
    filters.append("]");
    return new InpathScan(options, out, String.join(", ", sel), new ArrayList<>(where),
        groupBy, orderBy, limit, parts(), filters.toString(), aggDescription);
  }
}
