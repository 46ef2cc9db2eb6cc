package horovod.rs.spark;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.AfterClass;
import org.junit.Test;

/**
 * The trainer's exports end to end in one JVM: tables from rows, two ranks on threads training
 * through their engines, checkpoints, the saved model and predictions.
 */
public class NativeTrainerTest {
    private static final byte[] SECRET = "unit-test-secret".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    private static final ExecutorService POOL = Executors.newCachedThreadPool();
    private static final StructType SCHEMA = new StructType()
            .add("x1", DataTypes.DoubleType).add("x2", DataTypes.DoubleType).add("y", DataTypes.DoubleType);
    private static final String SPEC = "{\"inputs\": [{\"name\": \"x\", \"type\": \"float\", \"columns\": [\"x1\", \"x2\"]}],"
            + " \"layers\": [{\"name\": \"h\", \"type\": \"dense\", \"input\": \"x\", \"units\": 8, \"activation\": \"tanh\"},"
            + " {\"name\": \"y_hat\", \"type\": \"dense\", \"input\": \"h\", \"units\": 1}],"
            + " \"outputs\": [\"y_hat\"]}";
    private static final String CONFIG = "{\"label_columns\": [\"y\"], \"batch_size\": 16, \"epochs\": %d,"
            + " \"loss\": \"mse\", \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.02}, \"seed\": 4}";

    @AfterClass
    public static void stopPool() {
        POOL.shutdownNow();
    }

    /** y = 2 x1 - x2, {@code rows} rows drawn from {@code seed}. */
    private static NativeTable table(int rows, long seed) {
        Random random = new Random(seed);
        List<InternalRow> list = new ArrayList<>();
        for (int i = 0; i < rows; i++) {
            double x1 = random.nextDouble() * 2 - 1;
            double x2 = random.nextDouble() * 2 - 1;
            list.add(new GenericInternalRow(new Object[] {x1, x2, 2 * x1 - x2}));
        }
        return NativeTable.fromRows(list.iterator(), SCHEMA, List.of("x1", "x2", "y"),
                List.of("y"), false, Long.MAX_VALUE);
    }

    private static <T> List<T> onRanks(int size, Function<HorovodContext, T> body) throws Exception {
        return LoopbackRanks.run(size, body);
    }

    /** What a rank ends with. */
    private static final class End {
        final byte[] model;
        final byte[] checkpoint;
        final String history;

        End(byte[] model, byte[] checkpoint, String history) {
            this.model = model;
            this.checkpoint = checkpoint;
            this.history = history;
        }
    }

    private static End train(HorovodContext ctx, int rows, int epochs, byte[] resume) {
        NativeTable table = table(rows, 100 + ctx.rank());
        try (NativeTrainer trainer = NativeTrainer.create(ctx, table, SPEC, String.format(CONFIG, epochs), resume)) {
            while (!trainer.done()) {
                String report = trainer.runEpoch();
                assertTrue(report, report.contains("\"train\":{\"loss\":"));
            }
            return new End(trainer.modelBytes(), trainer.checkpoint(), trainer.historyJson());
        }
    }

    @Test
    public void ranksTrainToTheSameModelThatPredicts() throws Exception {
        int[] rows = {300, 170};
        List<End> ends = onRanks(2, ctx -> train(ctx, rows[ctx.rank()], 4, null));
        assertArrayEquals("ranks end with the same weights", ends.get(0).model, ends.get(1).model);
        assertEquals(ends.get(0).history.replaceAll("\"seconds\":[^,]*,\"samples_per_second\":[^,]*,", ""),
                ends.get(1).history.replaceAll("\"seconds\":[^,]*,\"samples_per_second\":[^,]*,", ""));
        assertTrue(ends.get(0).history, ends.get(0).history.startsWith("[{\"epoch\":0,"));

        // A checkpoint of every epoch is done at once: nothing more is trained.
        List<End> again = onRanks(2, ctx -> train(ctx, rows[ctx.rank()], 4, ends.get(0).checkpoint));
        assertArrayEquals(ends.get(0).model, again.get(0).model);

        try (NativePredictor predictor = NativePredictor.load(SPEC, ends.get(0).model);
                NativeTable test = table(200, 7)) {
            float[][] outputs = predictor.predict(test);
            assertEquals(1, outputs.length);
            assertEquals(200, outputs[0].length);
            float[] y = test.columnValues("y");
            double mse = 0;
            for (int i = 0; i < y.length; i++) {
                mse += (outputs[0][i] - y[i]) * (outputs[0][i] - y[i]) / y.length;
            }
            assertTrue("held-out mse " + mse + " should be below 0.05", mse < 0.05);
        }
    }

    @Test
    public void aRankWithoutRowsFailsEveryRank() throws Exception {
        List<String> errors = onRanks(2, ctx -> {
            try {
                train(ctx, ctx.rank() == 1 ? 0 : 50, 1, null);
                return "trained";
            } catch (HorovodException e) {
                return e.getMessage();
            }
        });
        for (String error : errors) {
            assertTrue(error, error.contains("rank 1 has no training rows"));
        }
    }

    @Test
    public void aBadConfigIsNamedAndTheTableIsStillConsumed() throws Exception {
        onRanks(1, ctx -> {
            NativeTable table = table(10, 1);
            try {
                NativeTrainer.create(ctx, table, SPEC, "{\"label_columns\": [\"y\"], \"batch\": 3}", null);
                fail("an unknown key is an error");
            } catch (HorovodException e) {
                assertTrue(e.getMessage(), e.getMessage().contains("unknown field `batch`"));
            }
            IllegalStateException closed = assertThrows(IllegalStateException.class, () -> table.columnValues("y"));
            assertTrue(closed.getMessage(), closed.getMessage().contains("the table is closed"));
            return null;
        });
    }
}
