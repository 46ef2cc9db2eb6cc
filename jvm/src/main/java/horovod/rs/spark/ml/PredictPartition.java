package horovod.rs.spark.ml;

import horovod.rs.spark.Lists;
import horovod.rs.spark.NativePredictor;
import horovod.rs.spark.NativeTable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.ml.linalg.VectorUDT;
import org.apache.spark.ml.linalg.Vectors;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.TaskCompletionListener;

/**
 * Inference over one partition: rows go to the native model a batch at a time (as Arrow
 * buffers, like training data), and each row comes back with the model's outputs appended.
 */
final class PredictPartition implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
    private static final long serialVersionUID = 1L;
    private static final VectorUDT VECTORS = new VectorUDT();

    private final StructType schema;
    private final List<String> features;
    private final String modelSpec;
    private final Broadcast<byte[]> model;
    private final List<Integer> outputWidths;
    private final int batchRows;

    PredictPartition(StructType schema, List<String> features, String modelSpec, Broadcast<byte[]> model,
            List<Integer> outputWidths, int batchRows) {
        this.schema = schema;
        this.features = Lists.copyOf(features);
        this.modelSpec = modelSpec;
        this.model = model;
        this.outputWidths = Lists.copyOf(outputWidths);
        this.batchRows = batchRows;
    }

    @Override
    public Iterator<InternalRow> call(Iterator<InternalRow> rows) {
        NativePredictor predictor = NativePredictor.load(modelSpec, model.value());
        TaskContext task = TaskContext.get();
        if (task != null) {
            task.addTaskCompletionListener((TaskCompletionListener) done -> predictor.close());
        }
        return new Batches(rows, predictor);
    }

    /** The partition's rows with outputs, predicted a batch ahead of what is read. */
    private final class Batches implements Iterator<InternalRow> {
        private final Iterator<InternalRow> rows;
        private final NativePredictor predictor;
        private final List<InternalRow> batch = new ArrayList<>();
        private float[][] outputs;
        private int position;

        Batches(Iterator<InternalRow> rows, NativePredictor predictor) {
            this.rows = rows;
            this.predictor = predictor;
        }

        @Override
        public boolean hasNext() {
            return position < batch.size() || nextBatch();
        }

        @Override
        public InternalRow next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            Object[] values = new Object[outputs.length];
            for (int o = 0; o < outputs.length; o++) {
                int width = outputWidths.get(o);
                if (width == 1) {
                    values[o] = (double) outputs[o][position];
                } else {
                    double[] vector = new double[width];
                    for (int i = 0; i < width; i++) {
                        vector[i] = outputs[o][position * width + i];
                    }
                    values[o] = VECTORS.serialize(Vectors.dense(vector));
                }
            }
            return new JoinedRow(batch.get(position++), new GenericInternalRow(values));
        }

        private boolean nextBatch() {
            batch.clear();
            position = 0;
            while (batch.size() < batchRows && rows.hasNext()) {
                batch.add(rows.next().copy()); // Spark reuses row objects between next() calls.
            }
            if (batch.isEmpty()) {
                return false;
            }
            try (NativeTable table = NativeTable.fromRows(batch.iterator(), schema,
                    features, Collections.emptyList(), false, batch.size())) {
                outputs = predictor.predict(table);
            }
            return true;
        }
    }
}
