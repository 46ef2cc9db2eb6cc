package horovod.rs.spark;

import java.lang.reflect.Array;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What one rank knows about the job, and the collectives it joins. Handed to a
 * {@link RankFunction} inside its barrier task; valid only while that function runs.
 *
 * <p>Every collective goes through this rank's engine (Horovod's design): a named submission that
 * runs once every rank has submitted the same name, whatever order the ranks submit names in.
 * The {@code ...Async} methods return a {@link HorovodHandle} at once; the others submit under an
 * automatic name ({@code allreduce.noname.1}, {@code broadcast.noname.2}, ...: one counter per
 * context) and wait, so every rank must call them in the same order. Ranks that submit one name
 * with a different collective, array type or (except for {@code allgather} and {@code alltoall})
 * length all fail with a {@link HorovodException} naming the tensor and the ranks on each side.
 * A name may be in flight only once per rank at a time. Async methods accept a null name and then
 * use an automatic one.
 */
public final class HorovodContext {
    private final int rank;
    private final int size;
    private final int localRank;
    private final int localSize;
    private final List<String> gpuAddresses;
    private final NativeEngine engine;
    private final AtomicLong unnamed = new AtomicLong();

    HorovodContext(int rank, int size, int localRank, int localSize, List<String> gpuAddresses,
            NativeEngine engine) {
        this.rank = rank;
        this.size = size;
        this.localRank = localRank;
        this.localSize = localSize;
        this.gpuAddresses = Lists.copyOf(gpuAddresses);
        this.engine = engine;
    }

    /** This rank's engine, for native code that runs collectives itself (the trainer). */
    NativeEngine engine() {
        return engine;
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

    /*
     * Asynchronous collectives: each submits under {@code name} and returns at once.
     */

    /**
     * Submits {@link #allreduce(float[], ReduceOp)} of {@code data} as tensor {@code name}; the
     * handle's result is the new array.
     */
    public HorovodHandle<float[]> allreduceAsync(String name, float[] data, ReduceOp op) {
        return allreduceHandle(name, data, op, 1.0, 1.0);
    }


    /** {@link #allreduceAsync(String, float[], ReduceOp)} for doubles. */
    public HorovodHandle<double[]> allreduceAsync(String name, double[] data, ReduceOp op) {
        return allreduceHandle(name, data, op, 1.0, 1.0);
    }


    /** {@link #allreduceAsync(String, float[], ReduceOp)} for ints. */
    public HorovodHandle<int[]> allreduceAsync(String name, int[] data, ReduceOp op) {
        return allreduceHandle(name, data, op, 1.0, 1.0);
    }


    /** {@link #allreduceAsync(String, float[], ReduceOp)} for longs. */
    public HorovodHandle<long[]> allreduceAsync(String name, long[] data, ReduceOp op) {
        return allreduceHandle(name, data, op, 1.0, 1.0);
    }


    /** {@link #allreduceAsync(String, float[], ReduceOp)} for bytes. */
    public HorovodHandle<byte[]> allreduceAsync(String name, byte[] data, ReduceOp op) {
        return allreduceHandle(name, data, op, 1.0, 1.0);
    }


    /** Submits {@link #broadcast(float[], int)} of {@code data} as tensor {@code name}. */
    public HorovodHandle<float[]> broadcastAsync(String name, float[] data, int root) {
        return broadcastHandle(name, data, root);
    }


    /** {@link #broadcastAsync(String, float[], int)} for doubles. */
    public HorovodHandle<double[]> broadcastAsync(String name, double[] data, int root) {
        return broadcastHandle(name, data, root);
    }


    /** {@link #broadcastAsync(String, float[], int)} for ints. */
    public HorovodHandle<int[]> broadcastAsync(String name, int[] data, int root) {
        return broadcastHandle(name, data, root);
    }


    /** {@link #broadcastAsync(String, float[], int)} for longs. */
    public HorovodHandle<long[]> broadcastAsync(String name, long[] data, int root) {
        return broadcastHandle(name, data, root);
    }


    /** {@link #broadcastAsync(String, float[], int)} for bytes. */
    public HorovodHandle<byte[]> broadcastAsync(String name, byte[] data, int root) {
        return broadcastHandle(name, data, root);
    }


    /** Submits {@link #allgather(float[])} of {@code data} as tensor {@code name}. */
    public HorovodHandle<float[]> allgatherAsync(String name, float[] data) {
        return allgatherHandle(name, data);
    }


    /** {@link #allgatherAsync(String, float[])} for doubles. */
    public HorovodHandle<double[]> allgatherAsync(String name, double[] data) {
        return allgatherHandle(name, data);
    }


    /** {@link #allgatherAsync(String, float[])} for ints. */
    public HorovodHandle<int[]> allgatherAsync(String name, int[] data) {
        return allgatherHandle(name, data);
    }


    /** {@link #allgatherAsync(String, float[])} for longs. */
    public HorovodHandle<long[]> allgatherAsync(String name, long[] data) {
        return allgatherHandle(name, data);
    }


    /** {@link #allgatherAsync(String, float[])} for bytes. */
    public HorovodHandle<byte[]> allgatherAsync(String name, byte[] data) {
        return allgatherHandle(name, data);
    }


    /** Submits {@link #alltoall(float[], int[])} of {@code data} as tensor {@code name}. */
    public HorovodHandle<float[]> alltoallAsync(String name, float[] data, int[] splits) {
        return alltoallHandle(name, data, splits);
    }


    /** {@link #alltoallAsync(String, float[], int[])} for doubles. */
    public HorovodHandle<double[]> alltoallAsync(String name, double[] data, int[] splits) {
        return alltoallHandle(name, data, splits);
    }


    /** {@link #alltoallAsync(String, float[], int[])} for ints. */
    public HorovodHandle<int[]> alltoallAsync(String name, int[] data, int[] splits) {
        return alltoallHandle(name, data, splits);
    }


    /** {@link #alltoallAsync(String, float[], int[])} for longs. */
    public HorovodHandle<long[]> alltoallAsync(String name, long[] data, int[] splits) {
        return alltoallHandle(name, data, splits);
    }


    /** {@link #alltoallAsync(String, float[], int[])} for bytes. */
    public HorovodHandle<byte[]> alltoallAsync(String name, byte[] data, int[] splits) {
        return alltoallHandle(name, data, splits);
    }


    /** Submits {@link #reducescatter(float[], ReduceOp)} of {@code data} as tensor {@code name}. */
    public HorovodHandle<float[]> reducescatterAsync(String name, float[] data, ReduceOp op) {
        return reducescatterHandle(name, data, op);
    }


    /** {@link #reducescatterAsync(String, float[], ReduceOp)} for doubles. */
    public HorovodHandle<double[]> reducescatterAsync(String name, double[] data, ReduceOp op) {
        return reducescatterHandle(name, data, op);
    }


    /** {@link #reducescatterAsync(String, float[], ReduceOp)} for ints. */
    public HorovodHandle<int[]> reducescatterAsync(String name, int[] data, ReduceOp op) {
        return reducescatterHandle(name, data, op);
    }


    /** {@link #reducescatterAsync(String, float[], ReduceOp)} for longs. */
    public HorovodHandle<long[]> reducescatterAsync(String name, long[] data, ReduceOp op) {
        return reducescatterHandle(name, data, op);
    }


    /** {@link #reducescatterAsync(String, float[], ReduceOp)} for bytes. */
    public HorovodHandle<byte[]> reducescatterAsync(String name, byte[] data, ReduceOp op) {
        return reducescatterHandle(name, data, op);
    }


    /*
     * One checked path per collective: the synchronous methods wait on the handle of an unnamed
     * submission; the asynchronous ones return it.
     */

    private <A> A allreduceArray(A data, ReduceOp op, double prescale, double postscale) {
        return awaitAndClose(allreduceHandle(null, data, op, prescale, postscale));
    }

    private <A> A broadcastArray(A data, int root) {
        return awaitAndClose(broadcastHandle(null, data, root));
    }

    private <A> A allgatherArray(A data) {
        return awaitAndClose(allgatherHandle(null, data));
    }

    private <A> A alltoallArray(A data, int[] splits) {
        return awaitAndClose(alltoallHandle(null, data, splits));
    }

    private <A> A reducescatterArray(A data, ReduceOp op) {
        return awaitAndClose(reducescatterHandle(null, data, op));
    }

    private <A> HorovodHandle<A> allreduceHandle(String name, A data, ReduceOp op, double prescale,
            double postscale) {
        Objects.requireNonNull(data, "allreduce data must not be null");
        Objects.requireNonNull(op, "allreduce op must not be null");
        return submit("allreduce", name, data,
                (e, n) -> HorovodNative.submitAllreduce(e, n, data, op.name(), prescale, postscale));
    }

    private <A> HorovodHandle<A> broadcastHandle(String name, A data, int root) {
        Objects.requireNonNull(data, "broadcast data must not be null");
        if (root < 0 || root >= size) {
            throw new IllegalArgumentException(
                    "broadcast root " + root + " is not a rank of this job of " + size + " ranks");
        }
        return submit("broadcast", name, data, (e, n) -> HorovodNative.submitBroadcast(e, n, data, root));
    }

    private <A> HorovodHandle<A> allgatherHandle(String name, A data) {
        Objects.requireNonNull(data, "allgather data must not be null");
        return submit("allgather", name, data, (e, n) -> HorovodNative.submitAllgather(e, n, data));
    }

    private <A> HorovodHandle<A> alltoallHandle(String name, A data, int[] splits) {
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
        int[] copy = splits.clone();
        return submit("alltoall", name, data, (e, n) -> HorovodNative.submitAlltoall(e, n, data, copy));
    }

    private <A> HorovodHandle<A> reducescatterHandle(String name, A data, ReduceOp op) {
        Objects.requireNonNull(data, "reducescatter data must not be null");
        Objects.requireNonNull(op, "reducescatter op must not be null");
        return submit("reducescatter", name, data, (e, n) -> HorovodNative.submitReducescatter(e, n, data, op.name()));
    }

    /** One of {@link HorovodNative}'s submit calls, given the engine handle and the tensor name. */
    @FunctionalInterface
    private interface NativeSubmit {
        long submit(long engine, String name);
    }

    /** Submits under {@code name}, or under the next automatic name for {@code kind} if null. */
    private <A> HorovodHandle<A> submit(String kind, String name, A data, NativeSubmit call) {
        String tensor = name != null ? name : kind + ".noname." + unnamed.incrementAndGet();
        @SuppressWarnings("unchecked")
        Class<A> type = (Class<A>) data.getClass();
        return new HorovodHandle<>(tensor, type, engine.submit(e -> call.submit(e, tensor)));
    }

    private static <A> A awaitAndClose(HorovodHandle<A> handle) {
        try (HorovodHandle<A> owned = handle) {
            return owned.await();
        }
    }

    /** Returns once every rank has called it. */
    public void barrier() {
        awaitAndClose(submit("barrier", null, new byte[0], HorovodNative::submitBarrier));
    }

    @Override
    public String toString() {
        return "HorovodContext(rank " + rank + " of " + size + ", local " + localRank + " of " + localSize
                + (gpuAddresses.isEmpty() ? "" : ", gpus " + gpuAddresses) + ")";
    }
}
