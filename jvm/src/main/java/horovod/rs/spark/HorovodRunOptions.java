package horovod.rs.spark;

import java.io.Serializable;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import org.apache.spark.SparkConf;

/**
 * How {@link HorovodRunner#run} launches a job and tunes its engine. Immutable; each
 * {@code with...} returns a copy. {@link #fromConf(SparkConf)} starts from the Spark
 * configuration's keys and Horovod's variables in the driver's environment ({@link HorovodConf});
 * each {@code with...} sets one key. The native table of settings parses them once, on the driver,
 * and checks them: a refused value throws {@link IllegalArgumentException} naming its key. The
 * options travel to the tasks with the job, and each rank's spec carries only the settings given,
 * so a rank fills the rest from its executor's environment ({@code spark.executorEnv.*}), then from
 * the defaults. The getters say what the ranks run with unless that environment sets them.
 */
public final class HorovodRunOptions implements Serializable {
    private static final long serialVersionUID = 3L;

    private final JobSettings settings;
    private final int maxAttempts;

    private HorovodRunOptions(JobSettings settings, int maxAttempts) {
        if (maxAttempts < 1) {
            throw new IllegalArgumentException("maxAttempts must be at least 1, got " + maxAttempts);
        }
        this.settings = settings;
        this.maxAttempts = maxAttempts;
    }

    /** Options from the keys in {@code conf} and Horovod's variables in the driver's environment. */
    public static HorovodRunOptions fromConf(SparkConf conf) {
        return new HorovodRunOptions(JobSettings.fromConf(conf), 1);
    }

    /** Options from the keys in {@code conf} and Horovod's variables in {@code environment}. */
    static HorovodRunOptions fromConf(SparkConf conf, Map<String, String> environment) {
        return new HorovodRunOptions(JobSettings.fromConf(conf, environment), 1);
    }

    /**
     * Requests this many GPUs for each rank's task ({@code spark.task.resource.gpu.amount} for the
     * job's stage); each rank then sees its addresses in {@link HorovodContext#gpuAddresses()}.
     */
    public HorovodRunOptions withGpusPerRank(double gpus) {
        return with(HorovodConf.GPUS_PER_RANK, Double.toString(gpus));
    }

    /** How long all ranks may take to start before the job fails (Horovod's {@code start_timeout}). */
    public HorovodRunOptions withStartTimeout(Duration timeout) {
        return with(HorovodConf.START_TIMEOUT_MS, millis(timeout));
    }

    /** How long a rank may take to join the job: the address exchange, then connecting to every rank. */
    public HorovodRunOptions withConnectTimeout(Duration timeout) {
        return with(HorovodConf.CONNECT_TIMEOUT_MS, millis(timeout));
    }

    /** How long one collective may wait on a silent peer before it fails. */
    public HorovodRunOptions withCollectiveTimeout(Duration timeout) {
        return with(HorovodConf.COLLECTIVE_TIMEOUT_MS, millis(timeout));
    }

    /**
     * Whether ranks exchange addresses through a rendezvous service on the driver (needs executors
     * to reach the driver on one more port) or through one that rank 0's task hosts on a port
     * derived from the job's secret (reachable wherever the ranks' own links are).
     */
    public HorovodRunOptions withDriverRendezvous(boolean enabled) {
        return with(HorovodConf.DRIVER_RENDEZVOUS, Boolean.toString(enabled));
    }

    /** Whether ranks on several hosts reduce within each host first, then across hosts. */
    public HorovodRunOptions withHierarchicalAllreduce(boolean enabled) {
        return with(HorovodConf.HIERARCHICAL_ALLREDUCE, Boolean.toString(enabled));
    }

    /** Whether the links between ranks are encrypted (TLS 1.3 keyed from the job's secret). */
    public HorovodRunOptions withTls(boolean enabled) {
        return with(HorovodConf.TLS, Boolean.toString(enabled));
    }

    /** Most bytes the engine fuses into one allreduce; 0 turns fusion off. */
    public HorovodRunOptions withFusionThresholdBytes(long bytes) {
        return with(HorovodConf.FUSION_THRESHOLD_BYTES, Long.toString(bytes));
    }

    /** Time between the starts of two engine cycles. */
    public HorovodRunOptions withCycleTime(Duration cycleTime) {
        return with(HorovodConf.CYCLE_TIME_MS, millis(cycleTime));
    }

    /** How long a tensor missing on some ranks waits before it is logged; zero turns it off. */
    public HorovodRunOptions withStallWarning(Duration warning) {
        return with(HorovodConf.STALL_WARNING_MS, millis(warning));
    }

    /**
     * How long a tensor missing on some ranks waits before it fails; zero waits forever. Unset, it
     * is 0.8 times the collective timeout.
     */
    public HorovodRunOptions withStallTimeout(Duration timeout) {
        return with(HorovodConf.STALL_TIMEOUT_MS, millis(timeout));
    }

    /** Responses the engine keeps in its response cache; 0 turns the cache off. */
    public HorovodRunOptions withCacheCapacity(long responses) {
        return with(HorovodConf.CACHE_CAPACITY, Long.toString(responses));
    }

    /**
     * How many times the Run API runs the whole job when Spark loses a rank outside the function
     * (an executor dies); 1, the default, never runs it again. The function must be able to start
     * over (from its own checkpoint). Estimators use {@code spark.horovod.rs.fitAttempts}.
     */
    public HorovodRunOptions withMaxAttempts(int attempts) {
        return new HorovodRunOptions(settings, attempts);
    }

    public int maxAttempts() {
        return maxAttempts;
    }

    public boolean driverRendezvous() {
        return settings.driverRendezvous;
    }

    public double gpusPerRank() {
        return settings.gpusPerRank;
    }

    public Duration startTimeout() {
        return settings.startTimeout;
    }

    public Duration connectTimeout() {
        return settings.connectTimeout;
    }

    public Duration collectiveTimeout() {
        return settings.collectiveTimeout;
    }

    public boolean hierarchicalAllreduce() {
        return settings.hierarchicalAllreduce;
    }

    public boolean tls() {
        return settings.tls;
    }

    public long fusionThresholdBytes() {
        return settings.fusionThresholdBytes;
    }

    public Duration cycleTime() {
        return settings.cycleTime;
    }

    public Duration stallWarning() {
        return settings.stallWarning;
    }

    public Duration stallTimeout() {
        return settings.stallTimeout;
    }

    public long cacheCapacity() {
        return settings.cacheCapacity;
    }

    /** The rank-spec fields these options set, as a JSON object: what every rank's spec carries. */
    String rankSpecFields() {
        return settings.rankSpecFields;
    }

    private HorovodRunOptions with(HorovodConf<?> key, String value) {
        return new HorovodRunOptions(settings.with(key.key(), value), maxAttempts);
    }

    /** {@code value} in Spark's time format, whole milliseconds. */
    private static String millis(Duration value) {
        return Objects.requireNonNull(value, "a duration must not be null").toMillis() + "ms";
    }
}
