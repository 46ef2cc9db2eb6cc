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

    final String name;
    final int ordinal;
    /** Values per row; -1 until the first non-null row of an array or vector column. */
    int width;
    /** The last row's values, written by {@link #read}. */
    float[] values = new float[1];

    private ColumnReader(String name, int ordinal, int width) {
        this.name = name;
        this.ordinal = ordinal;
        this.width = width;
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
        ScalarGetter scalar = scalar(type);
        if (scalar != null) {
            return new ColumnReader(field.name(), ordinal, 1) {
                @Override
                Status read(InternalRow row) {
                    if (row.isNullAt(this.ordinal)) {
                        return Status.NULL;
                    }
                    values[0] = (float) scalar.get(row, this.ordinal);
                    return Status.OK;
                }
            };
        }
        ElementGetter element = type instanceof ArrayType ? element(((ArrayType) type).elementType()) : null;
        if (element != null) {
            return new ColumnReader(field.name(), ordinal, -1) {
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
            return new ColumnReader(field.name(), ordinal, -1) {
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
    private interface ScalarGetter {
        double get(InternalRow row, int ordinal);
    }

    @FunctionalInterface
    private interface ElementGetter {
        double get(ArrayData array, int index);
    }

    private static ScalarGetter scalar(DataType type) {
        if (type == DoubleType$.MODULE$) return InternalRow::getDouble;
        if (type == FloatType$.MODULE$) return InternalRow::getFloat;
        if (type == IntegerType$.MODULE$) return InternalRow::getInt;
        if (type == LongType$.MODULE$) return InternalRow::getLong;
        if (type == ShortType$.MODULE$) return InternalRow::getShort;
        if (type == ByteType$.MODULE$) return InternalRow::getByte;
        if (type == BooleanType$.MODULE$) return (row, i) -> row.getBoolean(i) ? 1 : 0;
        if (type instanceof DecimalType) {
            DecimalType decimal = (DecimalType) type;
            return (row, i) -> row.getDecimal(i, decimal.precision(), decimal.scale()).toDouble();
        }
        return null;
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
