package dev.inpath.spark;

import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** Arrow types as Spark sees them through ArrowColumnVector, and Spark types in SQL. */
final class Types {
  private Types() {}

  /** The Spark type of an Arrow type that ArrowColumnVector reads, else null. */
  static DataType spark(ArrowType t) {
    switch (t.getTypeID()) {
      case Int: {
        ArrowType.Int i = (ArrowType.Int) t;
        if (!i.getIsSigned()) {
          return null;
        }
        switch (i.getBitWidth()) {
          case 8: return DataTypes.ByteType;
          case 16: return DataTypes.ShortType;
          case 32: return DataTypes.IntegerType;
          case 64: return DataTypes.LongType;
          default: return null;
        }
      }
      case FloatingPoint: {
        FloatingPointPrecision p = ((ArrowType.FloatingPoint) t).getPrecision();
        return p == FloatingPointPrecision.DOUBLE ? DataTypes.DoubleType
            : p == FloatingPointPrecision.SINGLE ? DataTypes.FloatType : null;
      }
      case Decimal: {
        ArrowType.Decimal d = (ArrowType.Decimal) t;
        return d.getBitWidth() == 128 && d.getPrecision() <= 38
            ? DataTypes.createDecimalType(d.getPrecision(), d.getScale()) : null;
      }
      case Utf8:
      case LargeUtf8:
      case Utf8View:
        return DataTypes.StringType;
      case Binary:
      case LargeBinary:
        return DataTypes.BinaryType;
      case Bool:
        return DataTypes.BooleanType;
      case Date:
        return ((ArrowType.Date) t).getUnit() == DateUnit.DAY ? DataTypes.DateType : null;
      case Timestamp: {
        ArrowType.Timestamp ts = (ArrowType.Timestamp) t;
        if (ts.getUnit() != TimeUnit.MICROSECOND) {
          return null;
        }
        return ts.getTimezone() == null ? DataTypes.TimestampNTZType : DataTypes.TimestampType;
      }
      default:
        return null;
    }
  }

  /** The table's Spark schema; a column of a type Spark cannot read is named. */
  static StructType spark(Schema schema, String table, String uri) {
    StructField[] out = new StructField[schema.getFields().size()];
    int i = 0;
    for (Field f : schema.getFields()) {
      DataType t = spark(f.getType());
      if (t == null) {
        throw new InpathException("inpath: table '" + table + "' on " + uri + ": column '"
            + f.getName() + "' has the Arrow type " + f.getType()
            + ", which the connector does not read", null);
      }
      out[i++] = new StructField(f.getName(), t, f.isNullable(), Metadata.empty());
    }
    return new StructType(out);
  }

  /** The type in DataFusion's SQL (for CAST), or null where there is none we use. */
  static String sql(DataType t) {
    if (t instanceof DecimalType) {
      DecimalType d = (DecimalType) t;
      return "DECIMAL(" + d.precision() + "," + d.scale() + ")";
    }
    if (t == DataTypes.LongType) {
      return "BIGINT";
    }
    if (t == DataTypes.IntegerType) {
      return "INT";
    }
    if (t == DataTypes.ShortType) {
      return "SMALLINT";
    }
    if (t == DataTypes.ByteType) {
      return "TINYINT";
    }
    if (t == DataTypes.DoubleType) {
      return "DOUBLE";
    }
    if (t == DataTypes.FloatType) {
      return "REAL";
    }
    if (t == DataTypes.StringType) {
      return "VARCHAR";
    }
    if (t == DataTypes.DateType) {
      return "DATE";
    }
    if (t == DataTypes.BooleanType) {
      return "BOOLEAN";
    }
    return null;
  }

  static boolean integral(DataType t) {
    return t == DataTypes.LongType || t == DataTypes.IntegerType || t == DataTypes.ShortType
        || t == DataTypes.ByteType;
  }

  /** Spark's decimal type for an integral type in decimal arithmetic (DecimalType.forType). */
  static DecimalType decimalOf(DataType t) {
    if (t instanceof DecimalType) {
      return (DecimalType) t;
    }
    if (t == DataTypes.ByteType) {
      return DataTypes.createDecimalType(3, 0);
    }
    if (t == DataTypes.ShortType) {
      return DataTypes.createDecimalType(5, 0);
    }
    if (t == DataTypes.IntegerType) {
      return DataTypes.createDecimalType(10, 0);
    }
    if (t == DataTypes.LongType) {
      return DataTypes.createDecimalType(20, 0);
    }
    return null;
  }
}
