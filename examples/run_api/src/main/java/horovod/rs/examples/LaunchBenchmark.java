package horovod.rs.examples;

import horovod.rs.spark.HorovodRunner;
import horovod.rs.spark.ReduceOp;
import org.apache.spark.sql.SparkSession;

/**
 * Launch overhead of the Run API: the wall time of {@code HorovodRunner.run} with 2 ranks doing
 * one 4-float allreduce, on a cluster that is already up. One warm-up run, then 5 timed runs,
 * printed as CSV {@code impl,run,seconds}. Run with {@code make bench-launch}.
 */
public final class LaunchBenchmark {
    private static final int RANKS = 2;
    private static final int RUNS = 5;

    private LaunchBenchmark() {}

    public static void main(String[] args) {
        SparkSession spark = SparkSession.builder().appName("horovod-rs launch benchmark").getOrCreate();
        try {
            launchOnce(spark);  // warm-up: executors registered, classes loaded, jar fetched
            System.out.println("impl,run,seconds");
            for (int run = 1; run <= RUNS; run++) {
                long start = System.nanoTime();
                launchOnce(spark);
                System.out.printf("horovod-rs,%d,%.3f%n", run, (System.nanoTime() - start) / 1e9);
            }
        } finally {
            spark.stop();
        }
    }

    private static void launchOnce(SparkSession spark) {
        float[] sum = HorovodRunner.run(spark, RANKS, ctx -> ctx.allreduce(new float[] {1, 2, 3, 4}, ReduceOp.SUM))
                .get(0);
        if (sum[3] != 4 * RANKS) {
            throw new IllegalStateException("wrong allreduce result " + java.util.Arrays.toString(sum));
        }
    }
}
