package horovod.rs.examples;

import horovod.rs.spark.HorovodContext;
import horovod.rs.spark.HorovodRunner;
import horovod.rs.spark.ReduceOp;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.apache.spark.sql.SparkSession;

/**
 * Data-parallel linear regression with the Run API: each rank makes its own shard of a synthetic
 * data set, computes the gradient of the mean squared error on it, averages gradients with
 * allreduce, and steps. Every rank ends with the same weights, close to the true ones.
 *
 * <p>Run with {@code make demo}, or:
 * {@code spark-submit --master local-cluster[2,1,1024] --jars horovod-rs.jar
 * --conf spark.plugins=horovod.rs.spark.HorovodPlugin --class horovod.rs.examples.LinearRegressionDemo
 * horovod-rs-examples.jar}
 */
public final class LinearRegressionDemo {
    static final double[] TRUE_WEIGHTS = {2.0, -3.5, 0.5, 1.25};
    static final double TRUE_BIAS = 0.75;
    static final int ROWS_PER_RANK = 20_000;
    static final int MAX_STEPS = 500;
    static final double LEARNING_RATE = 0.1;
    static final double TOLERANCE = 1e-10;

    private LinearRegressionDemo() {}

    /** What each rank returns: its final weights (bias last) and the loss at every step. */
    public record RankResult(int rank, double[] weights, double[] losses) implements java.io.Serializable {}

    public static void main(String[] args) {
        int numProc = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        SparkSession spark = SparkSession.builder().appName("horovod-rs linear regression demo").getOrCreate();
        try {
            long start = System.nanoTime();
            List<RankResult> results = HorovodRunner.run(spark, numProc, LinearRegressionDemo::train);
            double seconds = (System.nanoTime() - start) / 1e9;
            report(results, seconds);
        } finally {
            spark.stop();
        }
    }

    static RankResult train(HorovodContext ctx) {
        int features = TRUE_WEIGHTS.length;
        double[][] x = new double[ROWS_PER_RANK][features];
        double[] y = new double[ROWS_PER_RANK];
        Random random = new Random(1000 + ctx.rank());  // each rank its own shard
        for (int i = 0; i < ROWS_PER_RANK; i++) {
            double target = TRUE_BIAS;
            for (int j = 0; j < features; j++) {
                x[i][j] = random.nextGaussian();
                target += TRUE_WEIGHTS[j] * x[i][j];
            }
            y[i] = target + 0.1 * random.nextGaussian();
        }

        double[] weights = new double[features + 1];  // bias last
        double[] losses = new double[MAX_STEPS];
        int steps = 0;
        double previousLoss = Double.MAX_VALUE;
        while (steps < MAX_STEPS) {
            // Local gradient of the mean squared error, with the loss in the last slot.
            double[] gradientAndLoss = new double[features + 2];
            for (int i = 0; i < ROWS_PER_RANK; i++) {
                double error = weights[features] - y[i];
                for (int j = 0; j < features; j++) {
                    error += weights[j] * x[i][j];
                }
                for (int j = 0; j < features; j++) {
                    gradientAndLoss[j] += 2 * error * x[i][j] / ROWS_PER_RANK;
                }
                gradientAndLoss[features] += 2 * error / ROWS_PER_RANK;
                gradientAndLoss[features + 1] += error * error / ROWS_PER_RANK;
            }
            double[] averaged = ctx.allreduce(gradientAndLoss, ReduceOp.AVERAGE);
            for (int j = 0; j <= features; j++) {
                weights[j] -= LEARNING_RATE * averaged[j];
            }
            double loss = averaged[features + 1];
            losses[steps++] = loss;
            // Every rank sees the same averaged loss, so every rank stops at the same step.
            if (Math.abs(previousLoss - loss) < TOLERANCE) {
                break;
            }
            previousLoss = loss;
        }
        return new RankResult(ctx.rank(), weights, Arrays.copyOf(losses, steps));
    }

    private static void report(List<RankResult> results, double seconds) {
        double[] losses = results.get(0).losses();
        System.out.println("step,loss");
        for (int step = 0; step < losses.length; step++) {
            if (step < 10 || step % 10 == 0 || step == losses.length - 1) {
                System.out.printf("%d,%.6f%n", step, losses[step]);
            }
        }
        System.out.printf("converged after %d steps in %.2f s on %d ranks%n", losses.length, seconds, results.size());
        double[] truth = Arrays.copyOf(TRUE_WEIGHTS, TRUE_WEIGHTS.length + 1);
        truth[TRUE_WEIGHTS.length] = TRUE_BIAS;
        System.out.println("true weights (bias last): " + format(truth));
        boolean identical = true;
        for (RankResult result : results) {
            System.out.println("rank " + result.rank() + " weights:          " + format(result.weights()));
            identical &= Arrays.equals(result.weights(), results.get(0).weights());
        }
        System.out.println(identical ? "all ranks hold bit-identical weights" : "RANKS DISAGREE ON WEIGHTS");
        if (!identical) {
            System.exit(1);
        }
    }

    private static String format(double[] values) {
        StringBuilder text = new StringBuilder("[");
        for (int i = 0; i < values.length; i++) {
            text.append(i == 0 ? "" : ", ").append(String.format("%8.4f", values[i]));
        }
        return text.append("]").toString();
    }
}
