package horovod.rs.spark;

import java.util.function.LongUnaryOperator;

/**
 * One rank's collective engine, owned by Java through a native handle. Submissions return at once
 * with a tensor handle; the engine's own thread negotiates and runs them.
 *
 * <p>{@link #close()} stops the engine on every rank (at its next cycle) and waits for this rank's
 * thread; tensors still in flight then fail.
 */
final class NativeEngine extends NativeHandle {
    NativeEngine(long handle) {
        super("engine (collectives are only possible inside the rank function)", handle,
                HorovodNative::engineClose);
    }

    /**
     * Leaves the job, telling the other ranks why ("rank 1 left the job (REASON)" in their errors);
     * the engine stops on every rank and this object is closed. Does nothing once closed.
     */
    synchronized void leave(String reason) {
        if (!isClosed()) {
            HorovodNative.engineLeave(release(), reason);
        }
    }

    /** Runs one of {@link HorovodNative}'s submit calls on this engine; returns the tensor handle. */
    synchronized long submit(LongUnaryOperator nativeSubmit) {
        return nativeSubmit.applyAsLong(live());
    }
}
