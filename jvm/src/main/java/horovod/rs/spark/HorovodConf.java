package horovod.rs.spark;

import java.util.List;
import java.util.function.Function;
import org.apache.spark.SparkConf;

/**
 * Every Spark configuration key horovod-rs reads. Keys, Horovod's variables, defaults, docs and
 * parsing are the native table of settings' (native/core's {@code launch/settings.rs}), declared
 * once for the JVM and the Python package alike; this class names them for Java code. Times take
 * Spark's format ({@code 30s}, {@code 5min}, {@code 500ms}; a bare number is milliseconds), sizes
 * too ({@code 64m}, {@code 1g}; a bare number is bytes).
 */
public final class HorovodConf<T> {
    public static final HorovodConf<Long> CONNECT_TIMEOUT_MS = new HorovodConf<>(
            "spark.horovod.rs.connectTimeout", s -> s.connectTimeout.toMillis());
    public static final HorovodConf<Long> COLLECTIVE_TIMEOUT_MS = new HorovodConf<>(
            "spark.horovod.rs.collectiveTimeout", s -> s.collectiveTimeout.toMillis());
    public static final HorovodConf<Boolean> HIERARCHICAL_ALLREDUCE = new HorovodConf<>(
            "spark.horovod.rs.hierarchicalAllreduce", s -> s.hierarchicalAllreduce);
    public static final HorovodConf<Boolean> TLS = new HorovodConf<>("spark.horovod.rs.tls", s -> s.tls);
    public static final HorovodConf<Long> FUSION_THRESHOLD_BYTES = new HorovodConf<>(
            "spark.horovod.rs.fusionThreshold", s -> s.fusionThresholdBytes);
    public static final HorovodConf<Long> CYCLE_TIME_MS = new HorovodConf<>(
            "spark.horovod.rs.cycleTime", s -> s.cycleTime.toMillis());
    public static final HorovodConf<Long> STALL_WARNING_MS = new HorovodConf<>(
            "spark.horovod.rs.stallWarning", s -> s.stallWarning.toMillis());
    /** Unset, 0.8 times the collective timeout: the stall check names the missing ranks before a wait times out. */
    public static final HorovodConf<Long> STALL_TIMEOUT_MS = new HorovodConf<>(
            "spark.horovod.rs.stallTimeout", s -> s.stallTimeout.toMillis());
    public static final HorovodConf<Long> CACHE_CAPACITY = new HorovodConf<>(
            "spark.horovod.rs.cacheCapacity", s -> s.cacheCapacity);
    public static final HorovodConf<Long> START_TIMEOUT_MS = new HorovodConf<>(
            "spark.horovod.rs.startTimeout", s -> s.startTimeout.toMillis());
    public static final HorovodConf<Integer> FIT_ATTEMPTS = new HorovodConf<>(
            "spark.horovod.rs.fitAttempts", s -> s.fitAttempts);
    /** Unset (null): a fit's later attempts wait for all of its ranks' slots. */
    public static final HorovodConf<Integer> FIT_MIN_PROCESSES = new HorovodConf<>(
            "spark.horovod.rs.fitMinProcesses", s -> s.fitMinProcesses);
    public static final HorovodConf<Double> GPUS_PER_RANK = new HorovodConf<>(
            "spark.horovod.rs.gpusPerRank", s -> s.gpusPerRank);
    /** On the JVM, true unless set to false: its driver runs inside the cluster, where the service is the fast way. */
    public static final HorovodConf<Boolean> DRIVER_RENDEZVOUS = new HorovodConf<>(
            "spark.horovod.rs.driverRendezvous", s -> s.driverRendezvous);

    /** All keys, in the native table's order. */
    public static final List<HorovodConf<?>> ALL = Lists.of(
            CONNECT_TIMEOUT_MS, COLLECTIVE_TIMEOUT_MS, HIERARCHICAL_ALLREDUCE, TLS, FUSION_THRESHOLD_BYTES,
            CYCLE_TIME_MS, STALL_WARNING_MS, STALL_TIMEOUT_MS, CACHE_CAPACITY, START_TIMEOUT_MS, FIT_ATTEMPTS,
            FIT_MIN_PROCESSES, GPUS_PER_RANK, DRIVER_RENDEZVOUS);

    private final String key;
    private final Function<JobSettings, T> value;

    private HorovodConf(String key, Function<JobSettings, T> value) {
        this.key = key;
        this.value = value;
    }

    /**
     * The value the driver uses: set in {@code conf}, else by Horovod's variable in the driver's
     * environment, else the default.
     *
     * @throws IllegalArgumentException naming a key or variable whose value is refused
     */
    public T get(SparkConf conf) {
        return value.apply(JobSettings.fromConf(conf));
    }

    public String key() {
        return key;
    }

    /** Horovod's environment variable for this setting, or null where Horovod has none. */
    public String variable() {
        return NativeSettings.row(key).variable();
    }

    /** The default in the key's format, e.g. {@code 600s}, or how it derives from another key. */
    public String defaultValue() {
        return NativeSettings.row(key).defaultValue();
    }

    public String doc() {
        return NativeSettings.row(key).doc();
    }
}
