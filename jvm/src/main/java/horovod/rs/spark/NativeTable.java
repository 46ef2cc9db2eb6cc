package horovod.rs.spark;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.StructType;

/**
 * A rank's training (or inference) data in native memory: named columns of {@code float}s, filled
 * from a partition's rows without files and without a JNI call per row.
 *
 * <p>Rows are written, a batch at a time, into one {@code float[]} (each column's values in a slot
 * of its own, {@code width} values per row), which Rust reads in place and copies in one call per
 * batch (docs/ingest.md). Rows with a null, a ragged array or a NaN label are counted per column and
 * never written: with {@code dropInvalidRows} they are dropped and counted in
 * {@link #droppedRows()}, otherwise the whole partition is read and then rejected with a message
 * naming each column and how many rows it spoiled.
 *
 * <p>Internal: the public surface is for {@code horovod.rs.spark.ml} only.
 */
public final class NativeTable extends NativeHandle {
    /**
     * Rows per batch: enough to amortise the call, few enough that a batch of a few dozen scalar
     * columns stays in a core's L1 data cache (256 rows of 37 columns: 38 KB; 8192 rows, 1.2 MB,
     * took 10 % longer than 1024, which was level with 256 or slower, docs/ingest.md).
     */
    static final int BATCH_ROWS = 256;

    /** Values a batch holds at most (64 MB), unless a single row is wider. */
    static final long MAX_BATCH_VALUES = 1L << 24;

    private final long rows;
    private final long droppedRows;

    private NativeTable(long handle, long rows, long droppedRows) {
        super("table", handle, HorovodNative::tableClose);
        this.rows = rows;
        this.droppedRows = droppedRows;
    }

    /**
     * Reads at most {@code maxRows} rows of {@code rows} into a table of exactly {@code columns}.
     *
     * @param labelColumns columns in which NaN is invalid too (features may hold NaN only if the
     *     model never sees them; the trainer rejects NaN features itself)
     */
    public static NativeTable fromRows(Iterator<InternalRow> rows, StructType schema, List<String> columns,
            List<String> labelColumns, boolean dropInvalidRows, long maxRows) {
        NativeLibrary.load();
        ColumnReader[] readers = new ColumnReader[columns.size()];
        boolean[] labels = new boolean[columns.size()];
        for (int c = 0; c < readers.length; c++) {
            String name = columns.get(c);
            if (name.contains("\n")) {
                throw new HorovodException("column name '" + name + "' contains a line break");
            }
            int ordinal = fieldIndex(schema, name);
            readers[c] = ColumnReader.of(schema.fields()[ordinal], ordinal);
            labels[c] = labelColumns.contains(name);
        }
        try (Ingest ingest = new Ingest(readers, labels)) {
            long read = 0;
            while (read < maxRows && rows.hasNext()) {
                ingest.add(rows.next());
                read++;
            }
            return ingest.finish(dropInvalidRows);
        }
    }

    private static int fieldIndex(StructType schema, String name) {
        String[] names = schema.fieldNames();
        for (int i = 0; i < names.length; i++) {
            if (names[i].equals(name)) {
                return i;
            }
        }
        throw new HorovodException("column '" + name + "' is not in the data; its columns are "
                + java.util.Arrays.toString(names));
    }

    /** Rows in the table. */
    public long rows() {
        return rows;
    }

    /** Rows left out because of nulls, ragged arrays or NaN labels (with {@code dropInvalidRows}). */
    public long droppedRows() {
        return droppedRows;
    }

    /** Every value of {@code column}, row after row (for tests and inspection). */
    public synchronized float[] columnValues(String column) {
        return HorovodNative.tableColumn(live(), column);
    }

    /** One pass over rows: validation, batches, native appends. */
    private static final class Ingest implements AutoCloseable {
        private final ColumnReader[] readers;
        private final boolean[] labels;
        /** Every column a plain scalar ({@link ColumnReader#plainKind}): rows Spark hands over as
         * {@code UnsafeRow}s are read straight into the batch ({@link #addPlain}). */
        private final boolean plain;
        private final int[] ordinals;
        private final int[] kinds;
        private final long[][] invalid; // [column][status]
        /** The batch being filled: column {@code c}'s values from {@code slot[c]}, row after row. */
        private float[] batch;
        private int[] slot;
        private long table;
        /** Rows a batch holds: {@link #BATCH_ROWS}, fewer for wide rows. */
        private int capacityRows;
        private int batchRows;
        private long rows;
        private long dropped;

        Ingest(ColumnReader[] readers, boolean[] labels) {
            this.readers = readers;
            this.labels = labels;
            this.invalid = new long[readers.length][ColumnReader.Status.values().length];
            this.ordinals = new int[readers.length];
            this.kinds = new int[readers.length];
            boolean allPlain = true;
            for (int c = 0; c < readers.length; c++) {
                ordinals[c] = readers[c].ordinal;
                kinds[c] = readers[c].plainKind;
                allPlain &= kinds[c] != ColumnReader.NOT_PLAIN;
            }
            this.plain = allPlain;
        }

        void add(InternalRow row) {
            if (plain && row instanceof UnsafeRow) {
                if (table == 0) {
                    start(); // every width is 1
                }
                if (addPlain((UnsafeRow) row)) {
                    if (++batchRows == capacityRows) {
                        flush();
                    }
                    return;
                }
            }
            addChecked(row);
        }

        /**
         * Reads a row of plain scalars into the batch, true when every value was valid; false (the
         * batch row left to be overwritten, nothing counted) at a null or a NaN label, for
         * {@link #addChecked} to count. The same values {@link ColumnReader#read} gives, without a
         * call per value: {@code UnsafeRow} is final, so each read inlines.
         */
        private boolean addPlain(UnsafeRow row) {
            int at = batchRows;
            for (int c = 0; c < kinds.length; c++) {
                int ordinal = ordinals[c];
                if (row.isNullAt(ordinal)) {
                    return false;
                }
                float value = ColumnReader.scalar(row, ordinal, kinds[c]);
                if (labels[c] && Float.isNaN(value)) {
                    return false;
                }
                batch[slot[c] + at] = value;
            }
            return true;
        }

        private void addChecked(InternalRow row) {
            boolean valid = true;
            for (int c = 0; c < readers.length; c++) {
                ColumnReader reader = readers[c];
                ColumnReader.Status status = reader.read(row);
                if (status == ColumnReader.Status.OK && labels[c] && hasNaN(reader.values, reader.width)) {
                    status = ColumnReader.Status.NAN;
                }
                if (status != ColumnReader.Status.OK) {
                    invalid[c][status.ordinal()]++;
                    valid = false;
                }
            }
            if (!valid) {
                dropped++;
                return;
            }
            if (table == 0) {
                start();
            }
            for (int c = 0; c < readers.length; c++) {
                int width = readers[c].width;
                if (width == 1) {
                    batch[slot[c] + batchRows] = readers[c].values[0];
                } else {
                    System.arraycopy(readers[c].values, 0, batch, slot[c] + batchRows * width, width);
                }
            }
            if (++batchRows == capacityRows) {
                flush();
            }
        }

        private static boolean hasNaN(float[] values, int width) {
            for (int i = 0; i < width; i++) {
                if (Float.isNaN(values[i])) {
                    return true;
                }
            }
            return false;
        }

        /** The first valid row fixes every column's width: create the table and its batch. */
        private void start() {
            StringBuilder names = new StringBuilder();
            int[] widths = new int[readers.length];
            long width = 0;
            for (int c = 0; c < readers.length; c++) {
                names.append(c == 0 ? "" : "\n").append(readers[c].name);
                widths[c] = readers[c].width;
                width += widths[c];
            }
            if (width > Integer.MAX_VALUE - 8) {
                throw new HorovodException("a row of " + width + " values is more than a batch (a Java array) holds");
            }
            // Wide rows (a hashed feature vector of millions of values) take fewer rows a batch.
            capacityRows = (int) Math.max(1, Math.min(BATCH_ROWS, MAX_BATCH_VALUES / Math.max(width, 1)));
            slot = new int[readers.length];
            int values = 0;
            for (int c = 0; c < readers.length; c++) {
                slot[c] = values;
                values += capacityRows * widths[c];
            }
            batch = new float[values];
            table = HorovodNative.tableCreate(names.toString(), widths);
        }

        private void flush() {
            if (batchRows == 0) {
                return;
            }
            HorovodNative.tableAppendBatch(table, batch, capacityRows, batchRows);
            rows += batchRows;
            batchRows = 0;
        }

        NativeTable finish(boolean dropInvalidRows) {
            if (table == 0) {
                // No valid row: widths of arrays and vectors are unknown, take 1.
                for (ColumnReader reader : readers) {
                    reader.width = Math.max(reader.width, 1);
                }
                start();
            }
            flush();
            long handle = table;
            table = 0;
            NativeTable result = new NativeTable(handle, rows, dropped);
            if (dropped > 0 && !dropInvalidRows) {
                result.close();
                throw new HorovodException(describeInvalid() + " (of " + (rows + dropped)
                        + " rows in this partition); fix the data or set dropInvalidRows to drop such rows");
            }
            return result;
        }

        private String describeInvalid() {
            List<String> parts = new ArrayList<>();
            for (int c = 0; c < readers.length; c++) {
                long[] counts = invalid[c];
                String name = "column '" + readers[c].name + "'";
                if (counts[ColumnReader.Status.NULL.ordinal()] > 0) {
                    parts.add(name + " has " + counts[ColumnReader.Status.NULL.ordinal()] + " null values");
                }
                if (counts[ColumnReader.Status.RAGGED.ordinal()] > 0) {
                    parts.add(name + " has " + counts[ColumnReader.Status.RAGGED.ordinal()]
                            + " ragged arrays (expected " + readers[c].width + " values per row)");
                }
                if (counts[ColumnReader.Status.NAN.ordinal()] > 0) {
                    parts.add(name + " has " + counts[ColumnReader.Status.NAN.ordinal()] + " NaN labels");
                }
            }
            return String.join("; ", parts);
        }

        @Override
        public void close() {
            if (table != 0) {
                HorovodNative.tableClose(table);
            }
        }
    }
}
