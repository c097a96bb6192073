package dev.inpath.spark;

import java.math.BigDecimal;
import java.time.LocalDate;
import org.apache.spark.sql.connector.expressions.Cast;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.GeneralScalarExpression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.NullOrdering;
import org.apache.spark.sql.connector.expressions.SortDirection;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Avg;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark's V2 expressions in DataFusion's SQL, where the translation means exactly what Spark
 * means; every method returns null for what it does not translate, and the caller leaves that
 * work to Spark.
 *
 * <p>Exactness is the rule: decimal literals are CASTs of their text (DataFusion reads 0.05 as
 * a double), integer literals in decimal arithmetic get Spark's literal precision, and decimal
 * arithmetic is pushed only where Spark's result type keeps the full scale (so Spark's value
 * and DataFusion's are the same exact number). Division, decimal-to-double casts and integer
 * overflow are Spark's.
 */
final class Sql {
  /** A translated expression and its Spark type. */
  static final class Typed {
    final String sql;
    final DataType type;

    Typed(String sql, DataType type) {
      this.sql = sql;
      this.type = type;
    }
  }

  private final StructType schema;

  Sql(StructType schema) {
    this.schema = schema;
  }

  static String ident(String name) {
    return "\"" + name.replace("\"", "\"\"") + "\"";
  }

  static String string(String s) {
    return "'" + s.replace("'", "''") + "'";
  }

  Typed expr(Expression e) {
    if (e instanceof NamedReference) {
      String[] names = ((NamedReference) e).fieldNames();
      if (names.length != 1) {
        return null;
      }
      for (StructField f : schema.fields()) {
        if (f.name().equals(names[0])) {
          return new Typed(ident(f.name()), f.dataType());
        }
      }
      return null;
    }
    if (e instanceof Literal) {
      return literal((Literal<?>) e);
    }
    if (e instanceof Cast) {
      return cast((Cast) e);
    }
    if (e instanceof GeneralScalarExpression) {
      return scalar((GeneralScalarExpression) e);
    }
    return null;
  }

  private static Typed literal(Literal<?> l) {
    Object v = l.value();
    DataType t = l.dataType();
    if (v == null) {
      return null;
    }
    if (t == DataTypes.BooleanType) {
      return new Typed(((Boolean) v) ? "TRUE" : "FALSE", t);
    }
    if (Types.integral(t)) {
      return new Typed("CAST(" + v + " AS " + Types.sql(t) + ")", t);
    }
    if (t instanceof DecimalType) {
      BigDecimal d = ((Decimal) v).toJavaBigDecimal();
      return new Typed("CAST(" + string(d.toPlainString()) + " AS " + Types.sql(t) + ")", t);
    }
    if (t == DataTypes.DoubleType) {
      double d = (Double) v;
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        return null;
      }
      return new Typed("CAST(" + string(Double.toString(d)) + " AS DOUBLE)", t);
    }
    if (t == DataTypes.StringType) {
      return new Typed(string(((UTF8String) v).toString()), t);
    }
    if (t == DataTypes.DateType) {
      return new Typed("DATE " + string(LocalDate.ofEpochDay((Integer) v).toString()), t);
    }
    return null;
  }

  private Typed cast(Cast c) {
    Typed in = expr(c.expression());
    DataType to = c.dataType();
    if (in == null) {
      return null;
    }
    DataType from = in.type;
    if (from.equals(to)) {
      return in;
    }
    boolean exact = false;
    if (Types.integral(from) && Types.integral(to)) {
      exact = width(to) >= width(from);
    } else if (Types.integral(from) && to instanceof DecimalType) {
      DecimalType d = (DecimalType) to;
      exact = d.precision() - d.scale() >= Types.decimalOf(from).precision();
    } else if (from instanceof DecimalType && to instanceof DecimalType) {
      DecimalType a = (DecimalType) from;
      DecimalType b = (DecimalType) to;
      exact = b.scale() >= a.scale() && b.precision() - b.scale() >= a.precision() - a.scale();
    } else if (from == DataTypes.IntegerType && to == DataTypes.DoubleType) {
      exact = true;
    }
    return exact ? new Typed("CAST(" + in.sql + " AS " + Types.sql(to) + ")", to) : null;
  }

  private static int width(DataType t) {
    return t == DataTypes.ByteType ? 1 : t == DataTypes.ShortType ? 2
        : t == DataTypes.IntegerType ? 4 : 8;
  }

  private Typed scalar(GeneralScalarExpression g) {
    String op = g.name();
    Expression[] ch = g.children();
    if ((op.equals("+") || op.equals("-") || op.equals("*")) && ch.length == 2) {
      Typed a = expr(ch[0]);
      Typed b = expr(ch[1]);
      if (a == null || b == null) {
        return null;
      }
      if (a.type == DataTypes.DoubleType && b.type == DataTypes.DoubleType) {
        return new Typed("(" + a.sql + " " + op + " " + b.sql + ")", DataTypes.DoubleType);
      }
      if (!(a.type instanceof DecimalType || b.type instanceof DecimalType)) {
        return null; // integer overflow is Spark's to report
      }
      DecimalType da = decimalOperand(a, ch[0]);
      DecimalType db = decimalOperand(b, ch[1]);
      if (da == null || db == null) {
        return null;
      }
      int p;
      int s;
      if (op.equals("*")) {
        p = da.precision() + db.precision() + 1;
        s = da.scale() + db.scale();
      } else {
        s = Math.max(da.scale(), db.scale());
        p = Math.max(da.precision() - da.scale(), db.precision() - db.scale()) + s + 1;
      }
      if (p > 38) {
        // Spark's DecimalPrecision.adjustPrecisionScale: keep it only when no scale is lost.
        int adjusted = Math.max(38 - (p - s), Math.min(s, 6));
        if (adjusted != s) {
          return null;
        }
        p = 38;
      }
      DecimalType t = DataTypes.createDecimalType(p, s);
      return new Typed("CAST((" + cast(a, da) + " " + op + " " + cast(b, db) + ") AS "
          + Types.sql(t) + ")", t);
    }
    if (op.equals("-") && ch.length == 1) {
      Typed a = expr(ch[0]);
      if (a == null || !(a.type instanceof DecimalType || a.type == DataTypes.DoubleType)) {
        return null;
      }
      return new Typed("(- " + a.sql + ")", a.type);
    }
    String p = predicate(g);
    return p == null ? null : new Typed(p, DataTypes.BooleanType);
  }

  /** An operand of decimal arithmetic as Spark types it (integer literals: their digits). */
  private static DecimalType decimalOperand(Typed t, Expression e) {
    if (t.type instanceof DecimalType) {
      return (DecimalType) t.type;
    }
    if (e instanceof Literal && Types.integral(t.type)) {
      long v = ((Number) ((Literal<?>) e).value()).longValue();
      int digits = Math.max(1, BigDecimal.valueOf(v).abs().precision());
      return DataTypes.createDecimalType(digits, 0);
    }
    return Types.decimalOf(t.type);
  }

  private static String cast(Typed t, DecimalType d) {
    return t.type.equals(d) ? t.sql : "CAST(" + t.sql + " AS " + Types.sql(d) + ")";
  }

  private static boolean comparable(DataType a, DataType b) {
    boolean na = Types.integral(a) || a instanceof DecimalType;
    boolean nb = Types.integral(b) || b instanceof DecimalType;
    if (na && nb) {
      return true;
    }
    return a.equals(b) && (a == DataTypes.StringType || a == DataTypes.DateType
        || a == DataTypes.BooleanType || a == DataTypes.DoubleType);
  }

  /** A predicate in SQL, or null. */
  String predicate(Expression e) {
    if (!(e instanceof GeneralScalarExpression)) {
      if (e instanceof Literal && ((Literal<?>) e).dataType() == DataTypes.BooleanType) {
        Typed t = literal((Literal<?>) e);
        return t == null ? null : t.sql;
      }
      return null;
    }
    GeneralScalarExpression g = (GeneralScalarExpression) e;
    Expression[] ch = g.children();
    switch (g.name()) {
      case "ALWAYS_TRUE":
        return "TRUE";
      case "ALWAYS_FALSE":
        return "FALSE";
      case "AND":
      case "OR": {
        String a = predicate(ch[0]);
        String b = predicate(ch[1]);
        return a == null || b == null ? null : "(" + a + " " + g.name() + " " + b + ")";
      }
      case "NOT": {
        String a = predicate(ch[0]);
        return a == null ? null : "(NOT " + a + ")";
      }
      case "IS_NULL":
      case "IS_NOT_NULL": {
        Typed a = expr(ch[0]);
        return a == null ? null
            : "(" + a.sql + (g.name().equals("IS_NULL") ? " IS NULL)" : " IS NOT NULL)");
      }
      case "=":
      case "<>":
      case "<":
      case "<=":
      case ">":
      case ">=":
      case "<=>": {
        Typed a = expr(ch[0]);
        Typed b = expr(ch[1]);
        if (a == null || b == null || !comparable(a.type, b.type)) {
          return null;
        }
        String op = g.name().equals("<=>") ? "IS NOT DISTINCT FROM" : g.name();
        return "(" + a.sql + " " + op + " " + b.sql + ")";
      }
      case "IN": {
        Typed a = expr(ch[0]);
        if (a == null) {
          return null;
        }
        StringBuilder sb = new StringBuilder("(" + a.sql + " IN (");
        for (int i = 1; i < ch.length; i++) {
          if (!(ch[i] instanceof Literal)) {
            return null;
          }
          Typed v = literal((Literal<?>) ch[i]);
          if (v == null || !comparable(a.type, v.type)) {
            return null;
          }
          sb.append(i > 1 ? ", " : "").append(v.sql);
        }
        return ch.length < 2 ? null : sb.append("))").toString();
      }
      case "STARTS_WITH":
      case "ENDS_WITH":
      case "CONTAINS": {
        Typed a = expr(ch[0]);
        Typed b = expr(ch[1]);
        if (a == null || b == null || a.type != DataTypes.StringType
            || b.type != DataTypes.StringType) {
          return null;
        }
        switch (g.name()) {
          case "STARTS_WITH":
            return "starts_with(" + a.sql + ", " + b.sql + ")";
          case "ENDS_WITH":
            return "ends_with(" + a.sql + ", " + b.sql + ")";
          default:
            return "(strpos(" + a.sql + ", " + b.sql + ") > 0)";
        }
      }
      default:
        return null;
    }
  }

  /**
   * An aggregate in SQL, cast to the type the scan declares for it, or null. {@code complete}:
   * the server computes the final value (one partition), so AVG and DISTINCT may go too.
   */
  Typed aggregate(AggregateFunc f, boolean complete) {
    if (f instanceof CountStar) {
      return new Typed("COUNT(*)", DataTypes.LongType);
    }
    if (f instanceof Count) {
      Count c = (Count) f;
      Typed a = expr(c.column());
      if (a == null || (c.isDistinct() && !complete)) {
        return null;
      }
      return new Typed("COUNT(" + (c.isDistinct() ? "DISTINCT " : "") + a.sql + ")",
          DataTypes.LongType);
    }
    if (f instanceof Sum) {
      Sum s = (Sum) f;
      Typed a = expr(s.column());
      if (a == null || (s.isDistinct() && !complete)) {
        return null;
      }
      String d = s.isDistinct() ? "DISTINCT " : "";
      if (a.type instanceof DecimalType) {
        DecimalType in = (DecimalType) a.type;
        DecimalType out = DataTypes.createDecimalType(Math.min(38, in.precision() + 10), in.scale());
        return new Typed("CAST(SUM(" + d + a.sql + ") AS " + Types.sql(out) + ")", out);
      }
      if (Types.integral(a.type)) {
        return new Typed("SUM(" + d + "CAST(" + a.sql + " AS BIGINT))", DataTypes.LongType);
      }
      if (a.type == DataTypes.DoubleType) {
        return new Typed("SUM(" + d + a.sql + ")", DataTypes.DoubleType);
      }
      return null;
    }
    if (f instanceof Min || f instanceof Max) {
      Typed a = expr(f instanceof Min ? ((Min) f).column() : ((Max) f).column());
      if (a == null || Types.sql(a.type) == null || a.type == DataTypes.BooleanType) {
        return null;
      }
      String fn = f instanceof Min ? "MIN" : "MAX";
      return new Typed("CAST(" + fn + "(" + a.sql + ") AS " + Types.sql(a.type) + ")", a.type);
    }
    if (f instanceof Avg && complete) {
      Avg v = (Avg) f;
      Typed a = expr(v.column());
      if (a == null || !(Types.integral(a.type) || a.type == DataTypes.DoubleType)) {
        return null; // AVG of decimals rounds: Spark's rounding is Spark's
      }
      return new Typed("AVG(" + (v.isDistinct() ? "DISTINCT " : "") + "CAST(" + a.sql
          + " AS DOUBLE))", DataTypes.DoubleType);
    }
    return null;
  }

  /** An ORDER BY item, or null. */
  String order(SortOrder o) {
    Typed a = expr(o.expression());
    if (a == null) {
      return null;
    }
    return a.sql + (o.direction() == SortDirection.ASCENDING ? " ASC" : " DESC")
        + (o.nullOrdering() == NullOrdering.NULLS_FIRST ? " NULLS FIRST" : " NULLS LAST");
  }
}
