package horovod.rs.spark;

import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BiConsumer;
import java.util.function.BiPredicate;
import java.util.function.IntFunction;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkJobInfo;
import org.apache.spark.SparkStageInfo;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.JavaSparkStatusTracker;
import org.apache.spark.rdd.RDD;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.resource.ResourceProfileBuilder;
import org.apache.spark.resource.TaskResourceRequests;
import org.apache.spark.sql.SparkSession;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.reflect.ClassTag$;
import scala.reflect.ClassTag;

/**
 * Horovod's Run API on Spark: runs a function on {@code numProc} ranks, one barrier task each,
 * connected to each other for collectives, and returns their results in rank order.
 *
 * <pre>{@code
 * List<Double> sums = HorovodRunner.run(spark, 2, ctx ->
 *     ctx.allreduce(new double[] {ctx.rank() + 1.0}, ReduceOp.SUM)[0]);   // [3.0, 3.0]
 * }</pre>
 *
 * <p>Launch is one barrier stage: all ranks start together or not at all. Ranks find each other
 * through a rendezvous service on the driver (or, with {@code spark.horovod.rs.driverRendezvous}
 * false, one rank 0's task hosts); connections are proven with a secret made here,
 * new for every job. A rank's exception fails the whole job with that exception's message.
 */
public final class HorovodRunner {
    private static final Logger LOG = LoggerFactory.getLogger(HorovodRunner.class);
    private static final int SECRET_BYTES = 32;
    private static final long POLL_MS = 200;

    private HorovodRunner() {}

    /** Runs {@code fn} on {@code numProc} ranks with options from the Spark configuration. */
    public static <T> List<T> run(SparkSession spark, int numProc, RankFunction<T> fn) {
        Objects.requireNonNull(spark, "spark must not be null");
        return run(spark, numProc, fn, HorovodRunOptions.fromConf(spark.sparkContext().getConf()));
    }

    /** Runs {@code fn} on {@code numProc} ranks; returns the ranks' results in rank order. */
    public static <T> List<T> run(SparkSession spark, int numProc, RankFunction<T> fn, HorovodRunOptions options) {
        Objects.requireNonNull(spark, "spark must not be null");
        Objects.requireNonNull(fn, "the rank function must not be null");
        if (numProc < 1) {
            throw new IllegalArgumentException("numProc must be at least 1, got " + numProc);
        }
        List<Integer> rankIds = IntStream.range(0, numProc).boxed().collect(Collectors.toList());
        RDD<Integer> seeds = JavaSparkContext.fromSparkContext(spark.sparkContext()).parallelize(rankIds, numProc).rdd();
        return withAttempts(options.maxAttempts(), "HorovodRunOptions.withMaxAttempts",
                attempt -> runOnPartitions(seeds, (ctx, partition) -> fn.call(ctx), options,
                        "horovod-rs: " + numProc + " ranks, attempt " + attempt),
                (attempt, lost) -> LOG.warn("attempt {} lost a rank outside the function; starting attempt {}: {}",
                        attempt, attempt + 1, lost.getMessage()));
    }

    /**
     * Runs {@code job} (given the attempt number, from 1) until it succeeds or {@code attempts}
     * attempts have lost a rank outside the ranks' code; {@code beforeRetry} hears each loss that
     * is retried. A rank's own failure is never retried. {@code knob} names what sets the count.
     */
    public static <T> T withAttempts(int attempts, String knob, IntFunction<T> job,
            BiConsumer<Integer, HorovodRankLostException> beforeRetry) {
        return withAttempts(attempts, knob, job, beforeRetry, (attempt, result) -> false);
    }

    /**
     * As {@link #withAttempts(int, String, IntFunction, BiConsumer)}; {@code again} may call an
     * attempt's result not final (a fit that stopped to run on more ranks): the next attempt runs,
     * and it does not count as one that lost a rank.
     */
    public static <T> T withAttempts(int attempts, String knob, IntFunction<T> job,
            BiConsumer<Integer, HorovodRankLostException> beforeRetry, BiPredicate<Integer, T> again) {
        int lostAttempts = 0;
        for (int attempt = 1; ; attempt++) {
            T result;
            try {
                result = job.apply(attempt);
            } catch (HorovodRankLostException lost) {
                lostAttempts++;
                if (lostAttempts >= attempts) {
                    throw new HorovodRankLostException(lost.getMessage() + " (attempt " + lostAttempts + " of "
                            + attempts + "; " + knob + " sets the number of attempts)", lost);
                }
                beforeRetry.accept(attempt, lost);
                continue;
            }
            if (!again.test(attempt, result)) {
                return result;
            }
        }
    }

    /**
     * Runs {@code fn} on one rank per partition of {@code data}, each with its partition's rows;
     * returns the ranks' results in rank order. The estimator trains this way: its data set is
     * repartitioned to the number of ranks first. {@code description} names the job in the Spark UI.
     */
    public static <I, T> List<T> runOnPartitions(RDD<I> data, PartitionFunction<I, T> fn, HorovodRunOptions options,
            String description) {
        Objects.requireNonNull(data, "data must not be null");
        Objects.requireNonNull(fn, "the partition function must not be null");
        Objects.requireNonNull(options, "options must not be null");
        int numProc = data.getNumPartitions();
        if (numProc < 1) {
            throw new IllegalArgumentException("the data set has no partitions to run ranks on");
        }
        SparkContext sc = data.sparkContext();
        BuildInfo.current().requireRunsOn(sc);
        byte[] secret = newSecret();
        try (RendezvousService service = options.driverRendezvous() ? RendezvousService.start(secret, numProc) : null) {
            String serviceAddress = service == null ? null : driverHost(sc) + ":" + service.port();
            RankTask<I, T> task = new RankTask<>(fn, numProc, secret, serviceAddress, options);
            RDD<RankOutcome> ranks = rankStage(data, task, options);
            long deadline = System.nanoTime() + options.startTimeout().toNanos();
            awaitSlots(sc, ranks, numProc, options, deadline);
            RankOutcome[] outcomes = collectWithin(sc, ranks, numProc, options, deadline, description);
            return resultsInRankOrder(outcomes, numProc);
        }
    }

    /** The address executors reach the driver at; Spark sets it when the context starts. */
    private static String driverHost(SparkContext sc) {
        return sc.getConf().get("spark.driver.host");
    }

    private static <I, T> RDD<RankOutcome> rankStage(RDD<I> data, RankTask<I, T> task, HorovodRunOptions options) {
        ClassTag<RankOutcome> outcomeTag = ClassTag$.MODULE$.apply(RankOutcome.class);
        RDD<RankOutcome> ranks = data.barrier().mapPartitions(task, false, outcomeTag);
        if (options.gpusPerRank() > 0) {
            // A task-only profile: the stage asks for GPUs without touching executor sizing.
            ResourceProfile gpuProfile = new ResourceProfileBuilder()
                    .require(new TaskResourceRequests().cpus(1).resource("gpu", options.gpusPerRank()))
                    .build();
            ranks = ranks.withResources(gpuProfile);
        }
        return ranks;
    }

    /**
     * Waits until the cluster has a task slot for every rank. Submitted earlier, a barrier stage
     * fails Spark's slot check and Spark tries again only every 15 s
     * ({@code spark.scheduler.barrier.maxConcurrentTasksCheck.interval}), which would dominate
     * the launch of a job submitted right after the session starts.
     */
    private static void awaitSlots(SparkContext sc, RDD<RankOutcome> ranks, int numProc, HorovodRunOptions options,
            long deadline) {
        ResourceProfile profile = ranks.getResourceProfile() != null
                ? ranks.getResourceProfile()
                : sc.resourceProfileManager().defaultResourceProfile();
        int slots = sc.maxNumConcurrentTasks(profile);
        while (slots < numProc) {
            if (System.nanoTime() > deadline) {
                throw new HorovodTimeoutException("the cluster has " + slots + " task slots for " + numProc
                        + " ranks after waiting " + options.startTimeout().getSeconds() + " s (add executors or "
                        + "cores, lower numProc, or raise " + HorovodConf.START_TIMEOUT_MS.key() + ")");
            }
            sleep(POLL_MS);
            slots = sc.maxNumConcurrentTasks(profile);
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new HorovodException("interrupted while waiting for the cluster to have enough task slots", e);
        }
    }

    /**
     * Runs the stage in its own job group and waits. Until every rank runs, the start timeout
     * applies (slots can be taken by other jobs between the check and the launch). Once all
     * ranks run, the collectives' own timeouts bound the wait.
     */
    private static RankOutcome[] collectWithin(SparkContext sc, RDD<RankOutcome> ranks, int numProc,
            HorovodRunOptions options, long deadline, String description) {
        String group = "horovod-rs-" + UUID.randomUUID();
        FutureTask<Object> job = new FutureTask<>(() -> {
            sc.setJobGroup(group, description, true);
            try {
                return ranks.collect();
            } finally {
                sc.clearJobGroup();
            }
        });
        Thread runner = new Thread(job, group);
        runner.setDaemon(true);
        runner.start();

        JavaSparkStatusTracker tracker = JavaSparkContext.fromSparkContext(sc).statusTracker();
        boolean allStarted = false;
        while (true) {
            try {
                return (RankOutcome[]) job.get(POLL_MS, TimeUnit.MILLISECONDS);
            } catch (TimeoutException stillRunning) {
                if (!allStarted) {
                    int running = runningTasks(tracker, group);
                    allStarted = running >= numProc;
                    if (!allStarted && System.nanoTime() > deadline) {
                        sc.cancelJobGroup(group);
                        throw new HorovodTimeoutException("only " + running + " of " + numProc
                                + " ranks started within " + options.startTimeout().getSeconds() + " s: other jobs "
                                + "hold the cluster's task slots (free them, lower numProc, or raise "
                                + HorovodConf.START_TIMEOUT_MS.key() + ")");
                    }
                }
            } catch (ExecutionException e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                String message = "the horovod-rs Spark job failed: " + cause.getMessage();
                throw HorovodRankLostException.isRankLost(cause) ? new HorovodRankLostException(message, cause)
                        : new HorovodException(message, cause);
            } catch (InterruptedException e) {
                sc.cancelJobGroup(group);
                Thread.currentThread().interrupt();
                throw new HorovodException("interrupted while waiting for the horovod-rs job", e);
            }
        }
    }

    private static int runningTasks(JavaSparkStatusTracker tracker, String group) {
        int running = 0;
        for (int jobId : tracker.getJobIdsForGroup(group)) {
            SparkJobInfo jobInfo = tracker.getJobInfo(jobId);
            if (jobInfo == null) {
                continue;
            }
            for (int stageId : jobInfo.stageIds()) {
                SparkStageInfo stage = tracker.getStageInfo(stageId);
                if (stage != null) {
                    running += stage.numActiveTasks();
                }
            }
        }
        return running;
    }

    /**
     * The results in rank order, or the root cause of a failure: the lowest rank that failed on
     * its own, not merely because another rank went away.
     */
    @SuppressWarnings("unchecked")
    static <T> List<T> resultsInRankOrder(RankOutcome[] outcomes, int size) {
        RankOutcome[] sorted = outcomes.clone();
        Arrays.sort(sorted, Comparator.comparingInt(o -> o.rank));
        RankOutcome rootCause = Arrays.stream(sorted).filter(o -> o.failed() && !o.followsPeer()).findFirst()
                .orElseGet(() -> Arrays.stream(sorted).filter(RankOutcome::failed).findFirst().orElse(null));
        if (rootCause != null) {
            throw new HorovodJobFailedException(rootCause.rank, size, rootCause.failureClass,
                    rootCause.failureMessage, rootCause.failureTrace);
        }
        List<T> results = new ArrayList<>(sorted.length);
        for (RankOutcome outcome : sorted) {
            results.add((T) outcome.result);
        }
        return results;
    }

    private static byte[] newSecret() {
        byte[] secret = new byte[SECRET_BYTES];
        new SecureRandom().nextBytes(secret);
        return secret;
    }
}
