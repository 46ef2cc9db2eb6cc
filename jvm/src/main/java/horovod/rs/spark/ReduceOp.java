package horovod.rs.spark;

/** How a collective combines the ranks' values, element by element. */
public enum ReduceOp {
    /** The sum over all ranks. */
    SUM,
    /** The sum divided by the number of ranks. */
    AVERAGE,
    /** The smallest value over all ranks. */
    MIN,
    /** The largest value over all ranks. */
    MAX,
    /** The product over all ranks. */
    PRODUCT
}
