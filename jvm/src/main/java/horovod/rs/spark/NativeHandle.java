package horovod.rs.spark;

import java.lang.ref.Cleaner;
import java.util.function.LongConsumer;

/**
 * A Java owner of one native object, known to Rust by an opaque {@code long} handle.
 *
 * <p>Subclasses serialise their native calls on this object ({@code synchronized}) and pass
 * {@link #live()}; {@link #close()} frees the native object exactly once, after which every
 * call fails with a message naming what was closed instead of touching freed memory. An owner
 * that becomes unreachable without being closed is freed by a {@link Cleaner}: a safety net
 * against leaks, not a substitute for {@code close()} (it runs late, on the cleaner's thread).
 */
abstract class NativeHandle implements AutoCloseable {
    private static final Cleaner CLEANER = Cleaner.create();

    private final String what;
    private final Owned owned;
    private final Cleaner.Cleanable cleanable;

    /**
     * @param free frees a handle; must not refer to this object (it also runs once this object
     *     is unreachable), so pass a static method such as {@code HorovodNative::closeListener}
     */
    NativeHandle(String what, long handle, LongConsumer free) {
        this.what = what;
        this.owned = new Owned(handle, free);
        this.cleanable = CLEANER.register(this, owned);
    }

    /** The handle, for a native call; fails if the object is closed. */
    final synchronized long live() {
        long handle = owned.get();
        if (handle == 0) {
            throw new IllegalStateException("the " + what + " is closed");
        }
        return handle;
    }

    /** Whether the native object is freed (or given up). */
    final synchronized boolean isClosed() {
        return owned.get() == 0;
    }

    /** Gives the handle up to a native call that consumes it; this object is closed afterwards. */
    final synchronized long release() {
        long released = live();
        owned.take();
        return released;
    }

    @Override
    public final synchronized void close() {
        cleanable.clean();
    }

    /** The handle and how to free it: the cleaning action, which must not reach the owner. */
    private static final class Owned implements Runnable {
        private final LongConsumer free;
        private long handle;

        Owned(long handle, LongConsumer free) {
            this.handle = handle;
            this.free = free;
        }

        synchronized long get() {
            return handle;
        }

        synchronized long take() {
            long taken = handle;
            handle = 0;
            return taken;
        }

        @Override
        public void run() {
            long taken = take();
            if (taken != 0) {
                free.accept(taken);
            }
        }
    }
}
