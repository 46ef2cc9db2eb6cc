package horovod.rs.spark;

import java.io.Serializable;
import java.util.Iterator;

/**
 * The code one rank runs over its partition of a data set: like {@link RankFunction}, with the
 * rows of the barrier task's partition. The estimator trains through it; the iterator may be
 * consumed at most once, and only while the function runs.
 */
@FunctionalInterface
public interface PartitionFunction<I, T> extends Serializable {
    T call(HorovodContext ctx, Iterator<I> partition) throws Exception;
}
