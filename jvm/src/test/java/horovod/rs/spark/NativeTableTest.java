package horovod.rs.spark;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.ml.linalg.VectorUDT;
import org.apache.spark.ml.linalg.Vectors;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.junit.Test;

/** Rows into a native table: every supported type, and bad rows named or dropped. */
public class NativeTableTest {
    private static final VectorUDT VECTORS = new VectorUDT();
    private static final StructType SCHEMA = new StructType()
            .add("d", DataTypes.DoubleType).add("i", DataTypes.IntegerType).add("l", DataTypes.LongType)
            .add("b", DataTypes.BooleanType).add("s", DataTypes.ShortType).add("f", DataTypes.FloatType)
            .add("dec", DataTypes.createDecimalType(10, 2))
            .add("arr", DataTypes.createArrayType(DataTypes.DoubleType))
            .add("vec", VECTORS).add("name", DataTypes.StringType);

    private static InternalRow row(Double d, int i, double[] arr, boolean sparse) {
        Object vector = sparse
                ? VECTORS.serialize(Vectors.sparse(4, new int[] {1, 3}, new double[] {i, -i}))
                : VECTORS.serialize(Vectors.dense(i, 0.5, 0, 2));
        Object array = arr == null ? null : new GenericArrayData(arr);
        return new GenericInternalRow(new Object[] {d, i, (long) i * 10, i % 2 == 0, (short) i, i * 0.5f,
                Decimal.apply("12.25"), array, vector, null});
    }

    private static NativeTable table(List<InternalRow> rows, List<String> columns, List<String> labels, boolean drop) {
        return NativeTable.fromRows(rows.iterator(), SCHEMA, columns, labels, drop,
                Long.MAX_VALUE);
    }

    @Test
    public void readsEveryTypeIncludingArraysAndVectors() {
        List<InternalRow> rows = new ArrayList<>();
        for (int i = 0; i < 20_000; i++) { // many batches
            rows.add(row(i * 1.5, i, new double[] {i, i + 1.0}, i % 3 == 0));
        }
        try (NativeTable t = table(rows, List.of("d", "i", "l", "b", "s", "f", "dec", "arr", "vec"), List.of("d"),
                false)) {
            assertEquals(20_000, t.rows());
            assertEquals(0, t.droppedRows());
            float[] d = t.columnValues("d");
            assertEquals(20_000, d.length);
            assertEquals(1.5f * 12_345, d[12_345], 0);
            assertEquals(123_450f, t.columnValues("l")[12_345], 0);
            assertEquals(1f, t.columnValues("b")[2], 0);
            assertEquals(12.25f, t.columnValues("dec")[7], 0);
            assertArrayEquals(new float[] {7, 8}, java.util.Arrays.copyOfRange(t.columnValues("arr"), 14, 16), 0);
            float[] arr = t.columnValues("arr");
            float[] ints = t.columnValues("i");
            for (int i = 0; i < 20_000; i++) { // every row where it belongs, across every batch's slots
                assertEquals(i, ints[i], 0);
                assertEquals(i, arr[2 * i], 0);
                assertEquals(i + 1.0f, arr[2 * i + 1], 0);
            }
            float[] vec = t.columnValues("vec");
            assertArrayEquals("sparse row 3", new float[] {0, 3, 0, -3}, java.util.Arrays.copyOfRange(vec, 12, 16), 0);
            assertArrayEquals("dense row 4", new float[] {4, 0.5f, 0, 2}, java.util.Arrays.copyOfRange(vec, 16, 20), 0);
        }
    }

    @Test
    public void wideRowsTakeFewerRowsABatch() {
        // 66,000 values a row: a batch of 64 MB holds 254 rows, so 300 rows take two batches.
        int width = 66_000;
        double[] even = new double[width];
        double[] odd = new double[width];
        java.util.Arrays.fill(even, 2);
        java.util.Arrays.fill(odd, 1);
        odd[width - 1] = 3;
        List<InternalRow> rows = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            rows.add(row(0.0, i, i % 2 == 0 ? even : odd, false));
        }
        try (NativeTable t = table(rows, List.of("i", "arr"), List.of(), false)) {
            assertEquals(300, t.rows());
            float[] ints = t.columnValues("i");
            float[] arr = t.columnValues("arr");
            for (int i = 0; i < 300; i++) {
                assertEquals(i, ints[i], 0);
                assertEquals(i % 2 == 0 ? 2 : 1, arr[i * width], 0);
                assertEquals(i % 2 == 0 ? 2 : 3, arr[(i + 1) * width - 1], 0);
            }
        }
    }

    @Test
    public void nullsRaggedArraysAndNaNLabelsAreNamedWithCounts() {
        List<InternalRow> rows = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            Double d = i < 3 ? null : i < 5 ? Double.NaN : (double) i;
            double[] arr = i == 50 ? new double[] {1, 2, 3} : new double[] {1, 2};
            rows.add(row(d, i, arr, false));
        }
        HorovodException e = assertThrows(HorovodException.class,
                () -> table(rows, List.of("d", "arr"), List.of("d"), false));
        assertEquals("column 'd' has 3 null values; column 'd' has 2 NaN labels; column 'arr' has 1 ragged arrays "
                + "(expected 2 values per row) (of 100 rows in this partition); fix the data or set dropInvalidRows "
                + "to drop such rows", e.getMessage());
        try (NativeTable dropped = table(rows, List.of("d", "arr"), List.of("d"), true)) {
            assertEquals(94, dropped.rows());
            assertEquals(6, dropped.droppedRows());
            // Rows 5-99 but the ragged row 50 (read after the table started), in order.
            float[] d = dropped.columnValues("d");
            assertEquals(5f, d[0], 0);
            assertEquals(49f, d[44], 0);
            assertEquals(51f, d[45], 0);
            assertEquals(99f, d[93], 0);
            float[] arr = dropped.columnValues("arr");
            assertEquals(188, arr.length);
            assertArrayEquals(new float[] {1, 2}, java.util.Arrays.copyOfRange(arr, 90, 92), 0);
        }
        // NaN is only invalid in labels.
        try (NativeTable features = table(rows.subList(3, 10), List.of("d"), List.of(), false)) {
            assertEquals(7, features.rows());
            assertTrue(Float.isNaN(features.columnValues("d")[0]));
        }
    }

    @Test
    public void unsafeRowsOfPlainColumnsReadAsOtherRowsDo() {
        // Spark hands most rows over as UnsafeRows, which a table of plain scalar columns reads
        // without a call per value: the same values, counts and messages as any other row.
        List<String> plain = List.of("d", "i", "l", "b", "s", "f");
        StructType schema = new StructType().add("d", DataTypes.DoubleType).add("i", DataTypes.IntegerType)
                .add("l", DataTypes.LongType).add("b", DataTypes.BooleanType).add("s", DataTypes.ShortType)
                .add("f", DataTypes.FloatType);
        UnsafeProjection toUnsafe = UnsafeProjection.create(schema);
        List<InternalRow> generic = new ArrayList<>();
        List<InternalRow> unsafe = new ArrayList<>();
        for (int i = 0; i < 3_000; i++) { // many batches, nulls and NaN labels between them
            Double d = i % 700 == 5 ? null : i % 900 == 7 ? Double.NaN : i * 1.1;
            long l = (1L << 40) + 3L * i + 1; // beyond the integers a float holds exactly
            InternalRow row = new GenericInternalRow(new Object[] {d, -i, l, i % 2 == 0, (short) i, i * 0.25f});
            generic.add(row);
            unsafe.add(toUnsafe.apply(row).copy());
        }
        for (boolean drop : new boolean[] {false, true}) {
            for (List<String> labels : List.of(List.of("d"), List.<String>of())) {
                Object expected = tableOrMessage(generic, schema, plain, labels, drop);
                Object actual = tableOrMessage(unsafe, schema, plain, labels, drop);
                assertEquals("drop " + drop + ", labels " + labels, expected, actual);
            }
        }
    }

    /** Every column's values and the row counts of a table of {@code rows}, or its error message. */
    private static Object tableOrMessage(List<InternalRow> rows, StructType schema, List<String> columns,
            List<String> labels, boolean drop) {
        try (NativeTable t = NativeTable.fromRows(rows.iterator(), schema, columns, labels, drop, Long.MAX_VALUE)) {
            List<Object> seen = new ArrayList<>(List.of(t.rows(), t.droppedRows()));
            for (String column : columns) {
                // Lists of boxed floats, so NaN equals NaN.
                List<Float> values = new ArrayList<>();
                for (float v : t.columnValues(column)) {
                    values.add(v);
                }
                seen.add(values);
            }
            return seen;
        } catch (HorovodException e) {
            return e.getMessage();
        }
    }

    @Test
    public void unsupportedTypesAndMissingColumnsAreNamedBeforeReading() {
        HorovodException type = assertThrows(HorovodException.class,
                () -> table(List.of(), List.of("name"), List.of(), false));
        assertTrue(type.getMessage(), type.getMessage().startsWith("column 'name' is string, which the trainer cannot read"));
        HorovodException missing = assertThrows(HorovodException.class,
                () -> table(List.of(), List.of("price"), List.of(), false));
        assertTrue(missing.getMessage(), missing.getMessage().contains("column 'price' is not in the data"));
    }

    @Test
    public void readsAtMostMaxRows() {
        List<InternalRow> rows = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            rows.add(row((double) i, i, new double[] {1}, false));
        }
        Iterator<InternalRow> it = rows.iterator();
        try (NativeTable first = NativeTable.fromRows(it, SCHEMA, List.of("i"), List.of(), false, 4);
                NativeTable rest = NativeTable.fromRows(it, SCHEMA, List.of("i"), List.of(), false, 100)) {
            assertEquals(4, first.rows());
            assertArrayEquals(new float[] {4, 5, 6, 7, 8, 9}, rest.columnValues("i"), 0);
        }
    }
}
