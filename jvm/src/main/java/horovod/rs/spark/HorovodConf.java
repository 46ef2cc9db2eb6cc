package horovod.rs.spark;

import java.util.List;
import java.util.function.BiFunction;
import org.apache.spark.SparkConf;

/**
 * Every Spark configuration key horovod-rs reads, declared once with its doc and default.
 * Time values accept Spark's suffixes ({@code 30s}, {@code 5min}, {@code 500ms}).
 */
public final class HorovodConf<T> {
    public static final HorovodConf<Long> START_TIMEOUT_MS = time(
            "spark.horovod.rs.startTimeout", "600s",
            "How long a job may wait for task slots and for all its ranks to start; past it the job fails "
                    + "saying how many slots or ranks there were (Horovod's `HOROVOD_SPARK_START_TIMEOUT`).");
    public static final HorovodConf<Long> CONNECT_TIMEOUT_MS = time(
            "spark.horovod.rs.connectTimeout", "120s",
            "How long a rank waits for every other rank to connect during rendezvous.");
    public static final HorovodConf<Long> COLLECTIVE_TIMEOUT_MS = time(
            "spark.horovod.rs.collectiveTimeout", "600s",
            "How long a collective may wait on a silent peer before it fails naming that rank.");
    public static final HorovodConf<Double> GPUS_PER_RANK = new HorovodConf<>(
            "spark.horovod.rs.gpusPerRank", "0",
            "GPUs requested for each rank's task; 0 runs on CPUs only.",
            (conf, key) -> Double.parseDouble(conf.get(key, "0")));

    public static final HorovodConf<Boolean> DRIVER_RENDEZVOUS = new HorovodConf<>(
            "spark.horovod.rs.driverRendezvous", "true",
            "Ranks exchange addresses through a service on the driver (executors must reach the driver on "
                    + "one more port); false uses Spark's barrier allGather, about a second slower per job.",
            (conf, key) -> parseBoolean(conf.get(key, "true")));

    public static final HorovodConf<Long> FUSION_THRESHOLD_BYTES = new HorovodConf<>(
            "spark.horovod.rs.fusionThreshold", "128m",
            "Most bytes the engine fuses into one allreduce; 0 turns fusion off; rank 0's value is used "
                    + "(Horovod's `HOROVOD_FUSION_THRESHOLD`). Spark size suffixes (`64m`, `1g`) apply.",
            (conf, key) -> conf.getSizeAsBytes(key, "128m"));
    public static final HorovodConf<Long> CYCLE_TIME_MS = time(
            "spark.horovod.rs.cycleTime", "1ms",
            "Time between the starts of two engine cycles: shorter lowers the latency of a single "
                    + "collective, longer fuses more tensors per cycle (Horovod's `HOROVOD_CYCLE_TIME`).");
    public static final HorovodConf<Long> STALL_WARNING_MS = time(
            "spark.horovod.rs.stallWarning", "60s",
            "A tensor submitted by some ranks and not others for this long is logged with the missing "
                    + "ranks, and again every period; 0 turns it off (Horovod's "
                    + "`HOROVOD_STALL_CHECK_TIME_SECONDS`).");
    public static final HorovodConf<Long> STALL_TIMEOUT_MS = time(
            "spark.horovod.rs.stallTimeout", "600s",
            "A tensor submitted by some ranks and not others for this long fails on every rank that "
                    + "submitted it, naming the missing ranks; 0 waits forever (Horovod's "
                    + "`HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`).");

    public static final HorovodConf<Integer> FIT_ATTEMPTS = new HorovodConf<>(
            "spark.horovod.rs.fitAttempts", "3",
            "How many times a fit runs its barrier job when Spark loses a rank outside the model's code (an "
                    + "executor dies); every attempt after the first resumes from the store's last checkpoint, or "
                    + "starts over when the fit has no store. The Python estimators read the same key.",
            (conf, key) -> atLeastOne(Integer.parseInt(conf.get(key, "3"))));

    /** All keys, for documentation. */
    public static final List<HorovodConf<?>> ALL = List.of(
            START_TIMEOUT_MS, CONNECT_TIMEOUT_MS, COLLECTIVE_TIMEOUT_MS, GPUS_PER_RANK, DRIVER_RENDEZVOUS,
            FUSION_THRESHOLD_BYTES, CYCLE_TIME_MS, STALL_WARNING_MS, STALL_TIMEOUT_MS, FIT_ATTEMPTS);

    private final String key;
    private final String defaultValue;
    private final String doc;
    private final BiFunction<SparkConf, String, T> reader;

    private HorovodConf(String key, String defaultValue, String doc, BiFunction<SparkConf, String, T> reader) {
        this.key = key;
        this.defaultValue = defaultValue;
        this.doc = doc;
        this.reader = reader;
    }

    private static HorovodConf<Long> time(String key, String defaultValue, String doc) {
        return new HorovodConf<>(key, defaultValue, doc, (conf, k) -> conf.getTimeAsMs(k, defaultValue));
    }

    private static boolean parseBoolean(String value) {
        if (value.equalsIgnoreCase("true") || value.equalsIgnoreCase("false")) {
            return Boolean.parseBoolean(value);
        }
        throw new IllegalArgumentException("expected true or false");
    }

    private static int atLeastOne(int value) {
        if (value < 1) {
            throw new IllegalArgumentException("expected a whole number of at least 1");
        }
        return value;
    }

    public T get(SparkConf conf) {
        try {
            return reader.apply(conf, key);
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("invalid value for " + key + ": " + conf.get(key, defaultValue)
                    + " (" + e.getMessage() + ")", e);
        }
    }

    public String key() {
        return key;
    }

    public String defaultValue() {
        return defaultValue;
    }

    public String doc() {
        return doc;
    }
}
