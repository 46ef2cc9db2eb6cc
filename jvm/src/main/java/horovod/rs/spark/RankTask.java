package horovod.rs.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.resource.ResourceInformation;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction1;

/**
 * The body of one barrier task: join the job, run the user's function, report.
 *
 * <p>Order matters: every rank must take part in the address exchange exactly once, even when it
 * cannot open its listener, or the others would wait for it until their timeout. So a rank that
 * fails before the exchange still takes part, with an error instead of an address, and every rank
 * then fails naming it (the native join checks the entries). Failures after the exchange become a
 * {@link RankOutcome}, never a failed Spark task: Spark retries failed barrier stages, which only
 * repeats a user's error.
 *
 * <p>The exchange goes through the driver's {@link RendezvousService} when there is one (inside the
 * native join), else through {@code BarrierTaskContext.allGather} (which costs about a second).
 */
final class RankTask<I, T> extends AbstractFunction1<Iterator<I>, Iterator<RankOutcome>>
        implements Serializable {
    private static final long serialVersionUID = 2L;
    /** Marks an allGather entry that carries an error instead of an address (native's FAILED_ENTRY_PREFIX). */
    private static final String FAILED_PREFIX = "!";

    private final PartitionFunction<I, T> fn;
    private final int size;
    private final byte[] secret;
    private final HorovodRunOptions options;
    /** The driver's rendezvous service, {@code host:port}; null to exchange with allGather. */
    private final String serviceAddress;

    RankTask(PartitionFunction<I, T> fn, int size, byte[] secret, String serviceAddress, HorovodRunOptions options) {
        this.fn = fn;
        this.size = size;
        this.secret = secret.clone();
        this.serviceAddress = serviceAddress;
        this.options = options;
    }

    @Override
    public Iterator<RankOutcome> apply(Iterator<I> partition) {
        BarrierTaskContext task = BarrierTaskContext.get();
        int rank = task.partitionId();
        return scala.collection.Iterator$.MODULE$.single(runRank(task, rank, partition));
    }

    private RankOutcome runRank(BarrierTaskContext task, int rank, Iterator<I> partition) {
        try {
            JoinedRank joined = join(task, rank);
            // The engine's thread owns the connections from here on; closing the engine stops it
            // on every rank, so a rank that returns or throws early does not leave peers waiting.
            // Leaving, a rank tells the others whether its function returned or failed (their errors
            // quote it).
            try (NativeEngine engine = joined.engine) {
                HorovodContext ctx = new HorovodContext(rank, size, joined.localRank, joined.localSize,
                        gpuAddresses(task), engine);
                T result;
                try {
                    result = fn.call(ctx, asJava(partition));
                } catch (Throwable e) {
                    engine.leave(HorovodNative.departure(e.getClass().getName() + ": " + e.getMessage()));
                    throw e;
                }
                engine.leave(HorovodNative.departure(null));
                return RankOutcome.success(rank, result);
            }
        } catch (Throwable e) {
            return RankOutcome.failure(rank, e);
        }
    }

    private JoinedRank join(BarrierTaskContext task, int rank) {
        if (serviceAddress != null) {
            NativeLibrary.load();
            return JoinedRank.throughService(RankSpec.throughService(rank, size, serviceAddress, executorHost(),
                    task.stageAttemptNumber(), options), secret);
        }
        NativeListener listener = null;
        String myEntry;
        Throwable listenFailure = null;
        try {
            NativeLibrary.load();
            listener = new NativeListener("0.0.0.0:0");
            myEntry = executorHost() + ":" + listener.port();
        } catch (Throwable e) {
            listenFailure = e;
            myEntry = FAILED_PREFIX + e;
        }
        List<String> entries = Arrays.asList(task.allGather(myEntry));
        if (listenFailure != null) {
            throw new HorovodException("rank " + rank + " could not start its rendezvous listener: " + listenFailure,
                    listenFailure);
        }
        return listener.join(RankSpec.withEntries(rank, entries, options), secret);
    }

    /** The partition as a Java iterator (Scala's own converters differ between Scala 2.12 and 2.13). */
    private static <I> java.util.Iterator<I> asJava(Iterator<I> partition) {
        return new java.util.Iterator<I>() {
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

    private static String executorHost() {
        return SparkEnv.get().blockManager().blockManagerId().host();
    }

    private static List<String> gpuAddresses(BarrierTaskContext task) {
        ResourceInformation gpus = task.resourcesJMap().get("gpu");
        return gpus == null ? Collections.emptyList() : Lists.of(gpus.addresses());
    }
}
