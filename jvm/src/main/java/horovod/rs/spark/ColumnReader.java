package horovod.rs.spark;

import org.apache.spark.ml.linalg.Vector;
import org.apache.spark.ml.linalg.VectorUDT;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType$;
import org.apache.spark.sql.types.ByteType$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType$;
import org.apache.spark.sql.types.FloatType$;
import org.apache.spark.sql.types.IntegerType$;
import org.apache.spark.sql.types.LongType$;
import org.apache.spark.sql.types.ShortType$;
import org.apache.spark.sql.types.StructField;

/**
 * Reads one column of Spark's internal rows as {@code float}s: a scalar gives one value, a
 * fixed-length numeric array or an ML vector gives {@code width} values, the same for every row.
 * Chosen once per column from its Spark type, so the per-row path has no type dispatch.
 */
abstract class ColumnReader {
    /** What a row's value was. */
    enum Status { OK, NULL, RAGGED, NAN }

    static final String SUPPORTED = "boolean, byte, short, int, long, float, double, decimal, "
            + "arrays of those, or Spark ML vectors";

    /** A scalar column's Spark type, for {@link #scalar}; {@link #NOT_PLAIN} for every other column. */
    static final int NOT_PLAIN = 0, DOUBLE = 1, FLOAT = 2, INT = 3, LONG = 4, SHORT = 5, BYTE = 6, BOOLEAN = 7;

    final String name;
    final int ordinal;
    /** This column's type if it is a plain scalar (not a decimal), else {@link #NOT_PLAIN}. */
    final int plainKind;
    /** Values per row; -1 until the first non-null row of an array or vector column. */
    int width;
    /** The last row's values, written by {@link #read}. */
    float[] values = new float[1];

    private ColumnReader(String name, int ordinal, int width, int plainKind) {
        this.name = name;
        this.ordinal = ordinal;
        this.width = width;
        this.plainKind = plainKind;
    }

    /** Reads this column of {@code row} into {@link #values}. */
    abstract Status read(InternalRow row);

    /** {@link #values}, grown to hold {@code n} values. */
    final float[] room(int n) {
        if (values.length < n) {
            values = new float[n];
        }
        return values;
    }

    /** A reader for {@code field}, or a {@link HorovodException} naming the column and its type. */
    static ColumnReader of(StructField field, int ordinal) {
        DataType type = field.dataType();
        int plain = plainKind(type);
        if (plain != NOT_PLAIN) {
            return new ColumnReader(field.name(), ordinal, 1, plain) {
                @Override
                Status read(InternalRow row) {
                    if (row.isNullAt(this.ordinal)) {
                        return Status.NULL;
                    }
                    values[0] = scalar(row, this.ordinal, plainKind);
                    return Status.OK;
                }
            };
        }
        if (type instanceof DecimalType) {
            DecimalType decimal = (DecimalType) type;
            return new ColumnReader(field.name(), ordinal, 1, NOT_PLAIN) {
                @Override
                Status read(InternalRow row) {
                    if (row.isNullAt(this.ordinal)) {
                        return Status.NULL;
                    }
                    values[0] = (float) row.getDecimal(this.ordinal, decimal.precision(), decimal.scale()).toDouble();
                    return Status.OK;
                }
            };
        }
        ElementGetter element = type instanceof ArrayType ? element(((ArrayType) type).elementType()) : null;
        if (element != null) {
            return new ColumnReader(field.name(), ordinal, -1, NOT_PLAIN) {
                @Override
                Status read(InternalRow row) {
                    if (row.isNullAt(this.ordinal)) {
                        return Status.NULL;
                    }
                    ArrayData array = row.getArray(this.ordinal);
                    int n = array.numElements();
                    if (width < 0) {
                        width = n;
                    } else if (n != width) {
                        return Status.RAGGED;
                    }
                    float[] out = room(n);
                    for (int i = 0; i < n; i++) {
                        if (array.isNullAt(i)) {
                            return Status.NULL;
                        }
                        out[i] = (float) element.get(array, i);
                    }
                    return Status.OK;
                }
            };
        }
        if (type instanceof VectorUDT) {
            VectorUDT udt = (VectorUDT) type;
            return new ColumnReader(field.name(), ordinal, -1, NOT_PLAIN) {
                @Override
                Status read(InternalRow row) {
                    if (row.isNullAt(this.ordinal)) {
                        return Status.NULL;
                    }
                    Vector vector = udt.deserialize(row.getStruct(this.ordinal, 4));
                    int n = vector.size();
                    if (width < 0) {
                        width = n;
                    } else if (n != width) {
                        return Status.RAGGED;
                    }
                    float[] out = room(n);
                    java.util.Arrays.fill(out, 0, n, 0f);
                    vector.foreachActive((index, value) -> {
                        out[(Integer) index] = (float) (double) (Double) value;
                        return scala.runtime.BoxedUnit.UNIT;
                    });
                    return Status.OK;
                }
            };
        }
        throw new HorovodException("column '" + field.name() + "' is " + type.simpleString()
                + ", which the trainer cannot read; supported: " + SUPPORTED);
    }

    @FunctionalInterface
    private interface ElementGetter {
        double get(ArrayData array, int index);
    }

    private static int plainKind(DataType type) {
        if (type == DoubleType$.MODULE$) return DOUBLE;
        if (type == FloatType$.MODULE$) return FLOAT;
        if (type == IntegerType$.MODULE$) return INT;
        if (type == LongType$.MODULE$) return LONG;
        if (type == ShortType$.MODULE$) return SHORT;
        if (type == ByteType$.MODULE$) return BYTE;
        if (type == BooleanType$.MODULE$) return BOOLEAN;
        return NOT_PLAIN;
    }

    /**
     * The non-null value at {@code ordinal} of a plain scalar column of type {@code kind}, as a
     * {@code float} rounded as the array readers round theirs (a long by way of a double).
     * Static, with the type a number, so that a caller whose row is known to be an
     * {@code UnsafeRow} (a final class) gets every read inlined.
     */
    static float scalar(InternalRow row, int ordinal, int kind) {
        switch (kind) {
            case DOUBLE: return (float) row.getDouble(ordinal);
            case FLOAT: return row.getFloat(ordinal);
            case INT: return row.getInt(ordinal);
            case LONG: return (float) (double) row.getLong(ordinal);
            case SHORT: return row.getShort(ordinal);
            case BYTE: return row.getByte(ordinal);
            case BOOLEAN: return row.getBoolean(ordinal) ? 1 : 0;
            default: throw new IllegalArgumentException("not a plain scalar kind: " + kind);
        }
    }

    private static ElementGetter element(DataType type) {
        if (type == DoubleType$.MODULE$) return ArrayData::getDouble;
        if (type == FloatType$.MODULE$) return ArrayData::getFloat;
        if (type == IntegerType$.MODULE$) return ArrayData::getInt;
        if (type == LongType$.MODULE$) return ArrayData::getLong;
        if (type == ShortType$.MODULE$) return ArrayData::getShort;
        if (type == ByteType$.MODULE$) return ArrayData::getByte;
        if (type == BooleanType$.MODULE$) return (array, i) -> array.getBoolean(i) ? 1 : 0;
        return null;
    }
}
