package horovod.rs.examples;

import horovod.rs.spark.HorovodRunOptions;
import horovod.rs.spark.HorovodRunner;
import horovod.rs.spark.ReduceOp;
import java.io.Serializable;
import java.util.List;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;
import scala.collection.Iterator;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * Launch overhead of the Run API: the wall time of {@code HorovodRunner.run} with 2 ranks doing
 * one 4-float allreduce, on a cluster that is already up. One warm-up run, then 5 timed runs,
 * printed as CSV {@code impl,run,seconds}, followed by the pieces launch time is made of: the
 * Run API with Spark's allGather for rendezvous, a plain two-task Spark job, and a barrier stage
 * that only calls allGather. Run with {@code make bench-launch}.
 */
public final class LaunchBenchmark {
    private static final int RANKS = 2;
    private static final int RUNS = 5;

    private LaunchBenchmark() {}

    public static void main(String[] args) {
        SparkSession spark = SparkSession.builder().appName("horovod-rs launch benchmark").getOrCreate();
        try {
            HorovodRunOptions defaults = HorovodRunOptions.fromConf(spark.sparkContext().getConf());
            // Warm-up: executors registered, classes loaded, jars fetched.
            launchOnce(spark, defaults);
            plainSparkJob(spark);
            barrierAllGather(spark);
            System.out.println("impl,run,seconds");
            time("horovod-rs", () -> launchOnce(spark, defaults));
            time("horovod-rs-allgather-rendezvous", () -> launchOnce(spark, defaults.withDriverRendezvous(false)));
            // Where the time goes: the same two tasks as a plain Spark job, and as a barrier
            // stage that only exchanges addresses with allGather, as the Run API's launch does.
            time("spark-job", () -> plainSparkJob(spark));
            time("spark-barrier-allgather", () -> barrierAllGather(spark));
        } finally {
            spark.stop();
        }
    }

    private static void time(String impl, Runnable job) {
        for (int run = 1; run <= RUNS; run++) {
            long start = System.nanoTime();
            job.run();
            System.out.printf("%s,%d,%.3f%n", impl, run, (System.nanoTime() - start) / 1e9);
        }
    }

    private static void plainSparkJob(SparkSession spark) {
        JavaSparkContext.fromSparkContext(spark.sparkContext())
                .parallelize(List.of(0, 1), RANKS)
                .map(rank -> rank + 1)
                .collect();
    }

    private static void barrierAllGather(SparkSession spark) {
        JavaSparkContext.fromSparkContext(spark.sparkContext())
                .parallelize(List.of(0, 1), RANKS)
                .rdd()
                .barrier()
                .mapPartitions(new AllGatherPartition(), false, ClassTag$.MODULE$.apply(String.class))
                .collect();
    }

    /** One allGather of a short string, the size of a rendezvous address. */
    private static final class AllGatherPartition
            extends AbstractFunction1<Iterator<Integer>, Iterator<String>> implements Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public Iterator<String> apply(Iterator<Integer> partition) {
            String[] all = BarrierTaskContext.get().allGather("127.0.0.1:12345");
            return scala.collection.Iterator$.MODULE$.single(String.join(",", all));
        }
    }

    private static void launchOnce(SparkSession spark, HorovodRunOptions options) {
        float[] sum = HorovodRunner.run(spark, RANKS,
                ctx -> ctx.allreduce(new float[] {1, 2, 3, 4}, ReduceOp.SUM), options).get(0);
        if (sum[3] != 4 * RANKS) {
            throw new IllegalStateException("wrong allreduce result " + java.util.Arrays.toString(sum));
        }
    }
}
