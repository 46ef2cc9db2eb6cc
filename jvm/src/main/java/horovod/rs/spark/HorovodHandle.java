package horovod.rs.spark;

import java.time.Duration;

/**
 * The pending result of one asynchronous collective (Horovod's handle): {@link #poll()} says
 * whether it is done, {@link #await()} (Horovod's {@code synchronize}) returns it.
 *
 * <p>The result is a new array of the submitted array's type. Once the result (or the error) has
 * arrived, the native side is freed and every later {@code await()} returns the same result (or
 * throws the same error). {@link #close()} frees the native side of a handle that is never waited
 * on; the collective itself still runs on every rank, and its result is dropped. Use
 * try-with-resources, or await every handle: an unclosed, unawaited handle is only freed once it
 * is garbage.
 *
 * @param <A> the array type of the result: {@code byte[]}, {@code int[]}, {@code long[]},
 *     {@code float[]} or {@code double[]}
 */
public final class HorovodHandle<A> implements AutoCloseable {
    /** Longest single native wait, so an interrupt is noticed between waits. */
    private static final long WAIT_SLICE_MS = 1000;

    private final String name;
    private final Class<A> type;
    private final Tensor tensor;
    private boolean finished;
    private A result;
    private RuntimeException failure;

    HorovodHandle(String name, Class<A> type, long tensorHandle) {
        this.name = name;
        this.type = type;
        this.tensor = new Tensor(name, tensorHandle);
    }

    /** The name the tensor was submitted under (the automatic one when none was given). */
    public String name() {
        return name;
    }

    /** True once the result (or an error) is available; never blocks. */
    public synchronized boolean poll() {
        if (!finished) {
            try {
                finish(HorovodNative.tensorPoll(tensor.live()));
            } catch (HorovodException e) {
                fail(e);
            }
        }
        return finished;
    }

    /**
     * Waits for the result and returns it, however long every rank takes to submit the tensor
     * (the engine's stall timeout, {@code spark.horovod.rs.stallTimeout}, bounds that).
     *
     * @throws HorovodException the collective's error, e.g. ranks submitted this name with
     *     different shapes; also when the waiting thread is interrupted
     */
    public A await() {
        return awaitUntil(Long.MAX_VALUE);
    }

    /**
     * {@link #await()}, giving up after {@code timeout}; the handle stays usable then.
     *
     * @throws HorovodTimeoutException when the result has not arrived within {@code timeout}
     */
    public A await(Duration timeout) {
        long now = System.nanoTime();
        long nanos = timeout.toNanos();
        return awaitUntil(nanos >= Long.MAX_VALUE - now ? Long.MAX_VALUE : now + nanos);
    }

    private A awaitUntil(long deadlineNanos) {
        while (true) {
            synchronized (this) {
                if (finished) {
                    if (failure != null) {
                        throw failure;
                    }
                    return result;
                }
                long leftMs = deadlineNanos == Long.MAX_VALUE
                        ? WAIT_SLICE_MS
                        : Math.min(WAIT_SLICE_MS, (deadlineNanos - System.nanoTime()) / 1_000_000);
                if (leftMs <= 0) {
                    throw new HorovodTimeoutException("tensor '" + name + "' is still in flight");
                }
                try {
                    finish(HorovodNative.tensorWait(tensor.live(), leftMs));
                } catch (HorovodException e) {
                    fail(e);
                }
            }
            if (Thread.currentThread().isInterrupted()) {
                throw new HorovodException("interrupted while waiting for tensor '" + name + "'");
            }
        }
    }

    private void finish(Object nativeResult) {
        if (nativeResult != null) {
            result = type.cast(nativeResult);
            finished = true;
            tensor.close();
        }
    }

    private void fail(HorovodException e) {
        failure = e;
        finished = true;
        tensor.close();
    }

    /** Frees the native side; the result, if not awaited yet, is dropped. */
    @Override
    public synchronized void close() {
        tensor.close();
    }

    @Override
    public String toString() {
        return "HorovodHandle(" + name + ")";
    }

    /** The native tensor handle. */
    private static final class Tensor extends NativeHandle {
        Tensor(String name, long handle) {
            super("handle of tensor '" + name + "'", handle, HorovodNative::tensorFree);
        }
    }
}
