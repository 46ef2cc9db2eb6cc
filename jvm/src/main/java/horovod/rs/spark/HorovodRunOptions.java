package horovod.rs.spark;

import java.io.Serializable;
import java.time.Duration;
import java.util.Objects;
import java.util.function.Consumer;
import org.apache.spark.SparkConf;

/**
 * How {@link HorovodRunner#run} launches a job and tunes its engine. Immutable; each
 * {@code with...} returns a copy. {@link #fromConf(SparkConf)} takes the defaults from the Spark
 * configuration ({@link HorovodConf}); the options are parsed once, on the driver, and travel to
 * the tasks with the job.
 */
public final class HorovodRunOptions implements Serializable, Cloneable {
    private static final long serialVersionUID = 2L;

    private double gpusPerRank;
    private Duration startTimeout;
    private Duration connectTimeout;
    private Duration collectiveTimeout;
    private boolean driverRendezvous;
    private long fusionThresholdBytes;
    private Duration cycleTime;
    private Duration stallWarning;
    private Duration stallTimeout;
    private int maxAttempts = 1;

    private HorovodRunOptions() {}

    /** Options with defaults from {@code conf}. */
    public static HorovodRunOptions fromConf(SparkConf conf) {
        HorovodRunOptions options = new HorovodRunOptions();
        options.gpusPerRank = HorovodConf.GPUS_PER_RANK.get(conf);
        options.startTimeout = Duration.ofMillis(HorovodConf.START_TIMEOUT_MS.get(conf));
        options.connectTimeout = Duration.ofMillis(HorovodConf.CONNECT_TIMEOUT_MS.get(conf));
        options.collectiveTimeout = Duration.ofMillis(HorovodConf.COLLECTIVE_TIMEOUT_MS.get(conf));
        options.driverRendezvous = HorovodConf.DRIVER_RENDEZVOUS.get(conf);
        options.fusionThresholdBytes = HorovodConf.FUSION_THRESHOLD_BYTES.get(conf);
        options.cycleTime = Duration.ofMillis(HorovodConf.CYCLE_TIME_MS.get(conf));
        options.stallWarning = Duration.ofMillis(HorovodConf.STALL_WARNING_MS.get(conf));
        options.stallTimeout = Duration.ofMillis(HorovodConf.STALL_TIMEOUT_MS.get(conf));
        return options.checked();
    }

    /**
     * Requests this many GPUs for each rank's task ({@code spark.task.resource.gpu.amount} for the
     * job's stage); each rank then sees its addresses in {@link HorovodContext#gpuAddresses()}.
     */
    public HorovodRunOptions withGpusPerRank(double gpus) {
        return with(copy -> copy.gpusPerRank = gpus);
    }

    /** How long all ranks may take to start before the job fails (Horovod's {@code start_timeout}). */
    public HorovodRunOptions withStartTimeout(Duration timeout) {
        return with(copy -> copy.startTimeout = timeout);
    }

    /** How long a rank waits for the others to connect during rendezvous. */
    public HorovodRunOptions withConnectTimeout(Duration timeout) {
        return with(copy -> copy.connectTimeout = timeout);
    }

    /** How long one collective may wait on a silent peer before it fails. */
    public HorovodRunOptions withCollectiveTimeout(Duration timeout) {
        return with(copy -> copy.collectiveTimeout = timeout);
    }

    /**
     * Whether ranks exchange addresses through a rendezvous service on the driver (fast; needs
     * executors to reach the driver on one more port) or through Spark's barrier
     * {@code allGather} (about a second slower per job, no extra port).
     */
    public HorovodRunOptions withDriverRendezvous(boolean enabled) {
        return with(copy -> copy.driverRendezvous = enabled);
    }

    /** Most bytes the engine fuses into one allreduce; 0 turns fusion off. */
    public HorovodRunOptions withFusionThresholdBytes(long bytes) {
        return with(copy -> copy.fusionThresholdBytes = bytes);
    }

    /** Time between the starts of two engine cycles. */
    public HorovodRunOptions withCycleTime(Duration cycleTime) {
        return with(copy -> copy.cycleTime = cycleTime);
    }

    /** How long a tensor missing on some ranks waits before it is logged; zero turns it off. */
    public HorovodRunOptions withStallWarning(Duration warning) {
        return with(copy -> copy.stallWarning = warning);
    }

    /** How long a tensor missing on some ranks waits before it fails; zero waits forever. */
    public HorovodRunOptions withStallTimeout(Duration timeout) {
        return with(copy -> copy.stallTimeout = timeout);
    }

    /**
     * How many times the Run API runs the whole job when Spark loses a rank outside the function
     * (an executor dies); 1, the default, never runs it again. The function must be able to start
     * over (from its own checkpoint). Estimators use {@code spark.horovod.rs.fitAttempts}.
     */
    public HorovodRunOptions withMaxAttempts(int attempts) {
        return with(copy -> copy.maxAttempts = attempts);
    }

    public int maxAttempts() {
        return maxAttempts;
    }

    public boolean driverRendezvous() {
        return driverRendezvous;
    }

    public double gpusPerRank() {
        return gpusPerRank;
    }

    public Duration startTimeout() {
        return startTimeout;
    }

    public Duration connectTimeout() {
        return connectTimeout;
    }

    public Duration collectiveTimeout() {
        return collectiveTimeout;
    }

    public long fusionThresholdBytes() {
        return fusionThresholdBytes;
    }

    public Duration cycleTime() {
        return cycleTime;
    }

    public Duration stallWarning() {
        return stallWarning;
    }

    public Duration stallTimeout() {
        return stallTimeout;
    }

    /** A copy of these options with {@code change} applied, checked. */
    private HorovodRunOptions with(Consumer<HorovodRunOptions> change) {
        HorovodRunOptions copy;
        try {
            copy = (HorovodRunOptions) clone();
        } catch (CloneNotSupportedException e) {
            throw new AssertionError(e);
        }
        change.accept(copy);
        return copy.checked();
    }

    private HorovodRunOptions checked() {
        if (!(gpusPerRank >= 0)) {
            throw new IllegalArgumentException("gpusPerRank must be >= 0, got " + gpusPerRank);
        }
        positive(startTimeout, "startTimeout");
        positive(connectTimeout, "connectTimeout");
        positive(collectiveTimeout, "collectiveTimeout");
        if (fusionThresholdBytes < 0) {
            throw new IllegalArgumentException("fusionThresholdBytes must be >= 0, got " + fusionThresholdBytes);
        }
        notNegative(cycleTime, "cycleTime");
        notNegative(stallWarning, "stallWarning");
        notNegative(stallTimeout, "stallTimeout");
        if (maxAttempts < 1) {
            throw new IllegalArgumentException("maxAttempts must be at least 1, got " + maxAttempts);
        }
        return this;
    }

    private static void positive(Duration value, String name) {
        notNegative(value, name);
        if (value.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, got " + value);
        }
    }

    private static void notNegative(Duration value, String name) {
        Objects.requireNonNull(value, name + " must not be null");
        if (value.isNegative()) {
            throw new IllegalArgumentException(name + " must not be negative, got " + value);
        }
    }
}
