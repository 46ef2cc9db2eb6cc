package horovod.rs.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.resource.ResourceInformation;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction1;

/**
 * The body of one barrier task: rendezvous, run the user's function, report.
 *
 * <p>Order matters: every rank must take part in the address exchange exactly once, even when it
 * cannot open its listener, or the others would wait for it until their timeout. So a rank that
 * fails before the exchange still takes part, with an error instead of an address, and every rank
 * then fails with that error. Failures after the exchange become a {@link RankOutcome}, never a
 * failed Spark task: Spark retries failed barrier stages, which only repeats a user's error.
 *
 * <p>The exchange goes through the driver's {@link RendezvousService} when there is one, else
 * through {@code BarrierTaskContext.allGather} (which costs about a second).
 */
final class RankTask<I, T> extends AbstractFunction1<Iterator<I>, Iterator<RankOutcome>>
        implements Serializable {
    private static final long serialVersionUID = 1L;
    /** Marks an allGather entry that carries an error instead of an address. */
    private static final String FAILED_PREFIX = "!";

    private final PartitionFunction<I, T> fn;
    private final int size;
    private final byte[] secret;
    private final long connectTimeoutMs;
    private final long collectiveTimeoutMs;
    /** The engine's knobs, parsed on the driver ({@link HorovodRunOptions#engineConfig()}). */
    private final String engineConfig;
    /** The driver's rendezvous service, {@code host:port}; null to exchange with allGather. */
    private final String serviceAddress;

    RankTask(PartitionFunction<I, T> fn, int size, byte[] secret, String serviceAddress, HorovodRunOptions options) {
        this.fn = fn;
        this.size = size;
        this.secret = secret.clone();
        this.serviceAddress = serviceAddress;
        this.connectTimeoutMs = options.connectTimeout().toMillis();
        this.collectiveTimeoutMs = options.collectiveTimeout().toMillis();
        this.engineConfig = options.engineConfig();
    }

    @Override
    public Iterator<RankOutcome> apply(Iterator<I> partition) {
        BarrierTaskContext task = BarrierTaskContext.get();
        int rank = task.partitionId();
        return scala.collection.Iterator$.MODULE$.single(runRank(task, rank, partition));
    }

    private RankOutcome runRank(BarrierTaskContext task, int rank, Iterator<I> partition) {
        NativeCommunicator.Listener listener = null;
        String myEntry;
        try {
            NativeLibrary.load();
            listener = new NativeCommunicator.Listener("0.0.0.0:0");
            myEntry = executorHost() + ":" + listener.port();
        } catch (Throwable e) {
            myEntry = FAILED_PREFIX + e;
        }
        try (NativeCommunicator.Listener owned = listener) {
            List<String> entries = exchange(task, rank, myEntry);
            checkEveryRankListens(entries);
            List<String> hosts = hostsOf(entries);
            // The engine's thread owns the connections from here on; closing the engine stops it
            // on every rank, so a rank that returns or throws early does not leave peers waiting.
            try (NativeEngine engine = owned.connect(rank, entries, secret, connectTimeoutMs, collectiveTimeoutMs)
                    .startEngine(engineConfig)) {
                HorovodContext ctx = new HorovodContext(rank, size, localRank(hosts, rank), localSize(hosts, rank),
                        gpuAddresses(task), engine);
                return RankOutcome.success(rank, fn.call(ctx, asJava(partition)));
            }
        } catch (Throwable e) {
            return RankOutcome.failure(rank, e);
        }
    }

    /** The partition as a Java iterator (Scala's own converters differ between Scala 2.12 and 2.13). */
    private static <I> java.util.Iterator<I> asJava(Iterator<I> partition) {
        return new java.util.Iterator<>() {
            @Override
            public boolean hasNext() {
                return partition.hasNext();
            }

            @Override
            public I next() {
                return partition.next();
            }
        };
    }

    private List<String> exchange(BarrierTaskContext task, int rank, String myEntry) {
        if (serviceAddress == null) {
            return Arrays.asList(task.allGather(myEntry));
        }
        String entries = HorovodNative.exchangeEntries(serviceAddress, secret, rank, size,
                task.stageAttemptNumber(), myEntry, connectTimeoutMs);
        return Arrays.asList(entries.split("\n", -1));
    }

    private static void checkEveryRankListens(List<String> entries) {
        for (int r = 0; r < entries.size(); r++) {
            if (entries.get(r).startsWith(FAILED_PREFIX)) {
                throw new HorovodException("rank " + r + " could not start its rendezvous listener: "
                        + entries.get(r).substring(FAILED_PREFIX.length()));
            }
        }
    }

    private static String executorHost() {
        return SparkEnv.get().blockManager().blockManagerId().host();
    }

    private static List<String> gpuAddresses(BarrierTaskContext task) {
        ResourceInformation gpus = task.resourcesJMap().get("gpu");
        return gpus == null ? List.of() : List.of(gpus.addresses());
    }

    /** The host part of each {@code host:port} entry (IPv6 hosts keep their colons). */
    static List<String> hostsOf(List<String> addresses) {
        List<String> hosts = new ArrayList<>(addresses.size());
        for (String address : addresses) {
            hosts.add(address.substring(0, address.lastIndexOf(':')));
        }
        return hosts;
    }

    /** How many ranks before {@code rank} share its host. */
    static int localRank(List<String> hosts, int rank) {
        int local = 0;
        for (int r = 0; r < rank; r++) {
            if (hosts.get(r).equals(hosts.get(rank))) {
                local++;
            }
        }
        return local;
    }

    /** How many ranks share {@code rank}'s host. */
    static int localSize(List<String> hosts, int rank) {
        int count = 0;
        for (String host : hosts) {
            if (host.equals(hosts.get(rank))) {
                count++;
            }
        }
        return count;
    }
}
