package horovod.rs.spark;

import java.lang.reflect.Array;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * What one rank knows about the job, and the collectives it joins. Handed to a
 * {@link RankFunction} inside its barrier task; valid only while that function runs.
 *
 * <p>Every rank must call the same collectives in the same order, with the same array type and, except
 * for {@code allgather} and {@code alltoall}, the same length; ranks that disagree fail with a
 * {@link HorovodException} naming a rank that disagrees.
 */
public final class HorovodContext {
    private final int rank;
    private final int size;
    private final int localRank;
    private final int localSize;
    private final List<String> gpuAddresses;
    private final NativeCommunicator communicator;

    HorovodContext(int rank, int size, int localRank, int localSize, List<String> gpuAddresses,
            NativeCommunicator communicator) {
        this.rank = rank;
        this.size = size;
        this.localRank = localRank;
        this.localSize = localSize;
        this.gpuAddresses = List.copyOf(gpuAddresses);
        this.communicator = communicator;
    }

    /** This rank, from 0 to {@code size() - 1}; equal to the barrier task's partition id. */
    public int rank() {
        return rank;
    }

    /** The number of ranks in the job. */
    public int size() {
        return size;
    }

    /** This rank's index among the ranks on the same host. */
    public int localRank() {
        return localRank;
    }

    /** The number of ranks on this rank's host. */
    public int localSize() {
        return localSize;
    }

    /** The GPU addresses Spark assigned to this task (empty unless GPUs were requested). */
    public List<String> gpuAddresses() {
        return gpuAddresses;
    }

    /*
     * Collectives. Each takes a byte[], int[], long[], float[] or double[] and returns a new array
     * of the same type; the argument is never changed. The overloads differ only in the array type
     * and share one checked path each.
     */

    /**
     * Combines {@code data} element-wise across all ranks (every rank passes the same length);
     * returns a new array. Integer sums and products wrap; integer averages truncate.
     */
    public float[] allreduce(float[] data, ReduceOp op) {
        return allreduceArray(data, op, 1.0, 1.0);
    }

    /** {@link #allreduce(float[], ReduceOp)} for doubles. */
    public double[] allreduce(double[] data, ReduceOp op) {
        return allreduceArray(data, op, 1.0, 1.0);
    }

    /** {@link #allreduce(float[], ReduceOp)} for ints. */
    public int[] allreduce(int[] data, ReduceOp op) {
        return allreduceArray(data, op, 1.0, 1.0);
    }

    /** {@link #allreduce(float[], ReduceOp)} for longs. */
    public long[] allreduce(long[] data, ReduceOp op) {
        return allreduceArray(data, op, 1.0, 1.0);
    }

    /** {@link #allreduce(float[], ReduceOp)} for bytes. */
    public byte[] allreduce(byte[] data, ReduceOp op) {
        return allreduceArray(data, op, 1.0, 1.0);
    }

    /**
     * {@link #allreduce(float[], ReduceOp)} with every input element multiplied by {@code prescale}
     * before the reduction and every result element by {@code postscale} after it (Horovod's
     * {@code prescale_factor} and {@code postscale_factor}; floating-point data only).
     */
    public float[] allreduce(float[] data, ReduceOp op, double prescale, double postscale) {
        return allreduceArray(data, op, prescale, postscale);
    }

    /** {@link #allreduce(float[], ReduceOp, double, double)} for doubles. */
    public double[] allreduce(double[] data, ReduceOp op, double prescale, double postscale) {
        return allreduceArray(data, op, prescale, postscale);
    }

    /** Returns a copy of rank {@code root}'s {@code data} on every rank (every rank passes the same length). */
    public float[] broadcast(float[] data, int root) {
        return broadcastArray(data, root);
    }

    /** {@link #broadcast(float[], int)} for doubles. */
    public double[] broadcast(double[] data, int root) {
        return broadcastArray(data, root);
    }

    /** {@link #broadcast(float[], int)} for ints. */
    public int[] broadcast(int[] data, int root) {
        return broadcastArray(data, root);
    }

    /** {@link #broadcast(float[], int)} for longs. */
    public long[] broadcast(long[] data, int root) {
        return broadcastArray(data, root);
    }

    /** {@link #broadcast(float[], int)} for bytes. */
    public byte[] broadcast(byte[] data, int root) {
        return broadcastArray(data, root);
    }

    /** Returns every rank's {@code data} concatenated in rank order; lengths may differ between ranks. */
    public float[] allgather(float[] data) {
        return allgatherArray(data);
    }

    /** {@link #allgather(float[])} for doubles. */
    public double[] allgather(double[] data) {
        return allgatherArray(data);
    }

    /** {@link #allgather(float[])} for ints. */
    public int[] allgather(int[] data) {
        return allgatherArray(data);
    }

    /** {@link #allgather(float[])} for longs. */
    public long[] allgather(long[] data) {
        return allgatherArray(data);
    }

    /** {@link #allgather(float[])} for bytes. */
    public byte[] allgather(byte[] data) {
        return allgatherArray(data);
    }

    /**
     * Sends the first {@code splits[0]} elements of {@code data} to rank 0, the next {@code splits[1]}
     * to rank 1, and so on; returns what every rank sent this one, concatenated in rank order.
     * {@code splits} has one non-negative entry per rank and adds up to {@code data.length}.
     */
    public float[] alltoall(float[] data, int[] splits) {
        return alltoallArray(data, splits);
    }

    /** {@link #alltoall(float[], int[])} for doubles. */
    public double[] alltoall(double[] data, int[] splits) {
        return alltoallArray(data, splits);
    }

    /** {@link #alltoall(float[], int[])} for ints. */
    public int[] alltoall(int[] data, int[] splits) {
        return alltoallArray(data, splits);
    }

    /** {@link #alltoall(float[], int[])} for longs. */
    public long[] alltoall(long[] data, int[] splits) {
        return alltoallArray(data, splits);
    }

    /** {@link #alltoall(float[], int[])} for bytes. */
    public byte[] alltoall(byte[] data, int[] splits) {
        return alltoallArray(data, splits);
    }

    /**
     * Combines {@code data} element-wise across all ranks and returns this rank's part of the result:
     * the elements are split into {@code size()} contiguous parts, the first {@code length % size()}
     * one element longer, and rank r gets part r.
     */
    public float[] reducescatter(float[] data, ReduceOp op) {
        return reducescatterArray(data, op);
    }

    /** {@link #reducescatter(float[], ReduceOp)} for doubles. */
    public double[] reducescatter(double[] data, ReduceOp op) {
        return reducescatterArray(data, op);
    }

    /** {@link #reducescatter(float[], ReduceOp)} for ints. */
    public int[] reducescatter(int[] data, ReduceOp op) {
        return reducescatterArray(data, op);
    }

    /** {@link #reducescatter(float[], ReduceOp)} for longs. */
    public long[] reducescatter(long[] data, ReduceOp op) {
        return reducescatterArray(data, op);
    }

    /** {@link #reducescatter(float[], ReduceOp)} for bytes. */
    public byte[] reducescatter(byte[] data, ReduceOp op) {
        return reducescatterArray(data, op);
    }

    private <A> A allreduceArray(A data, ReduceOp op, double prescale, double postscale) {
        return communicator.allreduce(
                Objects.requireNonNull(data, "allreduce data must not be null"),
                Objects.requireNonNull(op, "allreduce op must not be null"), prescale, postscale);
    }

    private <A> A broadcastArray(A data, int root) {
        Objects.requireNonNull(data, "broadcast data must not be null");
        if (root < 0 || root >= size) {
            throw new IllegalArgumentException(
                    "broadcast root " + root + " is not a rank of this job of " + size + " ranks");
        }
        return communicator.broadcast(data, root);
    }

    private <A> A allgatherArray(A data) {
        return communicator.allgather(Objects.requireNonNull(data, "allgather data must not be null"));
    }

    private <A> A alltoallArray(A data, int[] splits) {
        int length = Array.getLength(Objects.requireNonNull(data, "alltoall data must not be null"));
        Objects.requireNonNull(splits, "alltoall splits must not be null");
        if (splits.length != size) {
            throw new IllegalArgumentException("alltoall needs one split per rank: got " + splits.length
                    + " splits for " + size + " ranks");
        }
        long sum = 0;
        for (int split : splits) {
            if (split < 0) {
                throw new IllegalArgumentException("alltoall splits must not be negative, got " + Arrays.toString(splits));
            }
            sum += split;
        }
        if (sum != length) {
            throw new IllegalArgumentException("alltoall splits " + Arrays.toString(splits) + " add up to " + sum
                    + ", not to the data's " + length + " elements");
        }
        return communicator.alltoall(data, splits);
    }

    private <A> A reducescatterArray(A data, ReduceOp op) {
        return communicator.reducescatter(
                Objects.requireNonNull(data, "reducescatter data must not be null"),
                Objects.requireNonNull(op, "reducescatter op must not be null"));
    }

    /** Returns once every rank has called it. */
    public void barrier() {
        communicator.barrier();
    }

    @Override
    public String toString() {
        return "HorovodContext(rank " + rank + " of " + size + ", local " + localRank + " of " + localSize
                + (gpuAddresses.isEmpty() ? "" : ", gpus " + gpuAddresses) + ")";
    }
}
