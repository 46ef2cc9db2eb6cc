package horovod.rs.spark;

import java.io.Serializable;

/**
 * The code one rank runs: Spark ships it to every barrier task, where it is called once with
 * that rank's {@link HorovodContext}. Its result must be serializable; results come back to the
 * driver in rank order.
 */
@FunctionalInterface
public interface RankFunction<T> extends Serializable {
    T call(HorovodContext ctx) throws Exception;
}
