package horovod.rs.spark;

import java.io.Serializable;
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
 * <p>The exchange goes through the driver's {@link RendezvousService} when there is one, else
 * through one that rank 0's task hosts on a port derived from the job's secret (Spark's barrier
 * {@code allGather} would cost a second a job); both inside the native join.
 */
final class RankTask<I, T> extends AbstractFunction1<Iterator<I>, Iterator<RankOutcome>>
        implements Serializable {
    private static final long serialVersionUID = 2L;

    private final PartitionFunction<I, T> fn;
    private final int size;
    private final byte[] secret;
    private final HorovodRunOptions options;
    /** The driver's rendezvous service, {@code host:port}; null when rank 0's task hosts one. */
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
        NativeLibrary.load();
        if (serviceAddress != null) {
            return JoinedRank.throughService(RankSpec.throughService(rank, size, serviceAddress, executorHost(),
                    task.stageAttemptNumber(), options), secret);
        }
        String rankZeroHost = hostOf(task.getTaskInfos()[0].address());
        if (rank != 0) {
            return JoinedRank.throughService(RankSpec.throughService(rank, size,
                    HorovodNative.rankZeroCandidates(rankZeroHost, secret), executorHost(), task.stageAttemptNumber(),
                    options), secret);
        }
        // Rank 0 has its list once every rank registered, and closing leaves the replies under way
        // alone: the service is done once this rank joined.
        try (RendezvousService service = RendezvousService.forRankZero(secret, size)) {
            return JoinedRank.throughService(RankSpec.throughService(rank, size, rankZeroHost + ":" + service.port(),
                    executorHost(), task.stageAttemptNumber(), options), secret);
        }
    }

    private static String hostOf(String address) {
        int colon = address.lastIndexOf(':');
        return colon < 0 ? address : address.substring(0, colon);
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
