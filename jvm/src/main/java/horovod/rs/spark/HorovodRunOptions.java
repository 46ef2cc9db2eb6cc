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

    private HorovodRunOptions(double gpusPerRank, Duration startTimeout, Duration connectTimeout,
            Duration collectiveTimeout) {
        if (!(gpusPerRank >= 0)) {
            throw new IllegalArgumentException("gpusPerRank must be >= 0, got " + gpusPerRank);
        }
        this.gpusPerRank = gpusPerRank;
        this.startTimeout = positive(startTimeout, "startTimeout");
        this.connectTimeout = positive(connectTimeout, "connectTimeout");
        this.collectiveTimeout = positive(collectiveTimeout, "collectiveTimeout");
    }

    /** Options with defaults from {@code conf}. */
    public static HorovodRunOptions fromConf(SparkConf conf) {
        return new HorovodRunOptions(
                HorovodConf.GPUS_PER_RANK.get(conf),
                Duration.ofMillis(HorovodConf.START_TIMEOUT_MS.get(conf)),
                Duration.ofMillis(HorovodConf.CONNECT_TIMEOUT_MS.get(conf)),
                Duration.ofMillis(HorovodConf.COLLECTIVE_TIMEOUT_MS.get(conf)));
    }

    /**
     * Requests this many GPUs for each rank's task ({@code spark.task.resource.gpu.amount} for the
     * job's stage); each rank then sees its addresses in {@link HorovodContext#gpuAddresses()}.
     */
    public HorovodRunOptions withGpusPerRank(double gpus) {
        return new HorovodRunOptions(gpus, startTimeout, connectTimeout, collectiveTimeout);
    }

    /** How long all ranks may take to start before the job fails (Horovod's {@code start_timeout}). */
    public HorovodRunOptions withStartTimeout(Duration timeout) {
        return new HorovodRunOptions(gpusPerRank, timeout, connectTimeout, collectiveTimeout);
    }

    /** How long a rank waits for the others to connect during rendezvous. */
    public HorovodRunOptions withConnectTimeout(Duration timeout) {
        return new HorovodRunOptions(gpusPerRank, startTimeout, timeout, collectiveTimeout);
    }

    /** How long one collective may wait on a silent peer before it fails. */
    public HorovodRunOptions withCollectiveTimeout(Duration timeout) {
        return new HorovodRunOptions(gpusPerRank, startTimeout, connectTimeout, timeout);
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
