package horovod.rs.spark;

import java.io.Serializable;
import java.time.Duration;
import java.util.Objects;
import org.apache.spark.SparkConf;

/**
 * How {@link HorovodRunner#run} launches a job. Immutable; each {@code with...} returns a copy.
 * {@link #fromConf(SparkConf)} takes the defaults from the Spark configuration ({@link HorovodConf}).
 */
public final class HorovodRunOptions implements Serializable {
    private static final long serialVersionUID = 1L;

    private final double gpusPerRank;
    private final Duration startTimeout;
    private final Duration connectTimeout;
    private final Duration collectiveTimeout;
    private final boolean driverRendezvous;

    private HorovodRunOptions(double gpusPerRank, Duration startTimeout, Duration connectTimeout,
            Duration collectiveTimeout, boolean driverRendezvous) {
        if (!(gpusPerRank >= 0)) {
            throw new IllegalArgumentException("gpusPerRank must be >= 0, got " + gpusPerRank);
        }
        this.gpusPerRank = gpusPerRank;
        this.startTimeout = positive(startTimeout, "startTimeout");
        this.connectTimeout = positive(connectTimeout, "connectTimeout");
        this.collectiveTimeout = positive(collectiveTimeout, "collectiveTimeout");
        this.driverRendezvous = driverRendezvous;
    }

    /** Options with defaults from {@code conf}. */
    public static HorovodRunOptions fromConf(SparkConf conf) {
        return new HorovodRunOptions(
                HorovodConf.GPUS_PER_RANK.get(conf),
                Duration.ofMillis(HorovodConf.START_TIMEOUT_MS.get(conf)),
                Duration.ofMillis(HorovodConf.CONNECT_TIMEOUT_MS.get(conf)),
                Duration.ofMillis(HorovodConf.COLLECTIVE_TIMEOUT_MS.get(conf)),
                HorovodConf.DRIVER_RENDEZVOUS.get(conf));
    }

    /**
     * Requests this many GPUs for each rank's task ({@code spark.task.resource.gpu.amount} for the
     * job's stage); each rank then sees its addresses in {@link HorovodContext#gpuAddresses()}.
     */
    public HorovodRunOptions withGpusPerRank(double gpus) {
        return new HorovodRunOptions(gpus, startTimeout, connectTimeout, collectiveTimeout, driverRendezvous);
    }

    /** How long all ranks may take to start before the job fails (Horovod's {@code start_timeout}). */
    public HorovodRunOptions withStartTimeout(Duration timeout) {
        return new HorovodRunOptions(gpusPerRank, timeout, connectTimeout, collectiveTimeout, driverRendezvous);
    }

    /** How long a rank waits for the others to connect during rendezvous. */
    public HorovodRunOptions withConnectTimeout(Duration timeout) {
        return new HorovodRunOptions(gpusPerRank, startTimeout, timeout, collectiveTimeout, driverRendezvous);
    }

    /** How long one collective may wait on a silent peer before it fails. */
    public HorovodRunOptions withCollectiveTimeout(Duration timeout) {
        return new HorovodRunOptions(gpusPerRank, startTimeout, connectTimeout, timeout, driverRendezvous);
    }

    /**
     * Whether ranks exchange addresses through a rendezvous service on the driver (fast; needs
     * executors to reach the driver on one more port) or through Spark's barrier
     * {@code allGather} (about a second slower per job, no extra port).
     */
    public HorovodRunOptions withDriverRendezvous(boolean enabled) {
        return new HorovodRunOptions(gpusPerRank, startTimeout, connectTimeout, collectiveTimeout, enabled);
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

    private static Duration positive(Duration value, String name) {
        Objects.requireNonNull(value, name + " must not be null");
        if (value.isNegative() || value.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, got " + value);
        }
        return value;
    }
}
