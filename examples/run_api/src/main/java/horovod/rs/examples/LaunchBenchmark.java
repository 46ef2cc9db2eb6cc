package horovod.rs.examples;

import horovod.rs.spark.HorovodRunOptions;
import horovod.rs.spark.HorovodRunner;
import horovod.rs.spark.ReduceOp;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;
import scala.collection.Iterator;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * Launch overhead of the Run API: the wall time of {@code HorovodRunner.run} with 2 ranks doing
 * one 4-float allreduce, on a cluster that is already up, beside the pieces launch time is made
 * of: the Run API with Spark's allGather for rendezvous, a plain two-task Spark job, a barrier
 * stage whose tasks do nothing (the floor of any barrier launch), and one that only calls
 * allGather. One warm-up run of each, then {@code runs} rounds (default 15) that time each once,
 * in turn, so that a busy host's load falls on all of them alike. Prints CSV
 * {@code impl,run,seconds}, then each one's median as run {@code median}. Run with
 * {@code make bench-launch}.
 */
public final class LaunchBenchmark {
    private static final int RANKS = 2;
    private static final int DEFAULT_RUNS = 15;

    private LaunchBenchmark() {}

    public static void main(String[] args) {
        int runs = args.length > 0 ? Integer.parseInt(args[0]) : DEFAULT_RUNS;
        SparkSession spark = SparkSession.builder().appName("horovod-rs launch benchmark").getOrCreate();
        try {
            HorovodRunOptions defaults = HorovodRunOptions.fromConf(spark.sparkContext().getConf());
            // Where the time goes: the same two tasks as a plain Spark job, as a barrier stage,
            // and as a barrier stage that only exchanges addresses with allGather.
            Map<String, Runnable> jobs = new LinkedHashMap<>();
            jobs.put("horovod-rs", () -> launchOnce(spark, defaults));
            jobs.put("horovod-rs-rank-zero-rendezvous", () -> launchOnce(spark, defaults.withDriverRendezvous(false)));
            jobs.put("spark-job", () -> plainSparkJob(spark));
            jobs.put("spark-barrier", () -> barrier(spark, new EmptyPartition()));
            jobs.put("spark-barrier-allgather", () -> barrier(spark, new AllGatherPartition()));
            // Warm-up: executors registered, classes loaded, jars fetched.
            jobs.values().forEach(Runnable::run);
            Map<String, List<Double>> seconds = new LinkedHashMap<>();
            System.out.println("impl,run,seconds");
            for (int run = 1; run <= runs; run++) {
                for (Map.Entry<String, Runnable> job : jobs.entrySet()) {
                    long start = System.nanoTime();
                    job.getValue().run();
                    double took = (System.nanoTime() - start) / 1e9;
                    seconds.computeIfAbsent(job.getKey(), impl -> new ArrayList<>()).add(took);
                    System.out.printf("%s,%d,%.3f%n", job.getKey(), run, took);
                }
            }
            seconds.forEach((impl, times) -> System.out.printf("%s,median,%.3f%n", impl, median(times)));
        } finally {
            spark.stop();
        }
    }

    private static double median(List<Double> values) {
        List<Double> sorted = new ArrayList<>(values);
        Collections.sort(sorted);
        int mid = sorted.size() / 2;
        return sorted.size() % 2 == 1 ? sorted.get(mid) : (sorted.get(mid - 1) + sorted.get(mid)) / 2;
    }

    private static void plainSparkJob(SparkSession spark) {
        JavaSparkContext.fromSparkContext(spark.sparkContext())
                .parallelize(List.of(0, 1), RANKS)
                .map(rank -> rank + 1)
                .collect();
    }

    private static void barrier(SparkSession spark, AbstractFunction1<Iterator<Integer>, Iterator<String>> task) {
        JavaSparkContext.fromSparkContext(spark.sparkContext())
                .parallelize(List.of(0, 1), RANKS)
                .rdd()
                .barrier()
                .mapPartitions(task, false, ClassTag$.MODULE$.apply(String.class))
                .collect();
    }

    /** Nothing: what a barrier stage costs before its tasks do anything. */
    private static final class EmptyPartition
            extends AbstractFunction1<Iterator<Integer>, Iterator<String>> implements Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public Iterator<String> apply(Iterator<Integer> partition) {
            return scala.collection.Iterator$.MODULE$.empty();
        }
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
