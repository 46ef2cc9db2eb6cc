package horovod.rs.spark;

import java.util.List;
import java.util.Objects;

/**
 * What one rank knows about the job, and the collectives it joins. Handed to a
 * {@link RankFunction} inside its barrier task; valid only while that function runs.
 *
 * <p>Every rank must call the same collectives in the same order with arrays of the same length.
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

    /** Combines {@code data} element-wise across all ranks; returns a new array, {@code data} is unchanged. */
    public float[] allreduce(float[] data, ReduceOp op) {
        return communicator.allreduce(
                Objects.requireNonNull(data, "allreduce data must not be null"),
                Objects.requireNonNull(op, "allreduce op must not be null"));
    }

    /** Combines {@code data} element-wise across all ranks; returns a new array, {@code data} is unchanged. */
    public double[] allreduce(double[] data, ReduceOp op) {
        return communicator.allreduce(
                Objects.requireNonNull(data, "allreduce data must not be null"),
                Objects.requireNonNull(op, "allreduce op must not be null"));
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
