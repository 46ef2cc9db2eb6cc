package horovod.rs.spark;

import java.lang.ref.PhantomReference;
import java.lang.ref.ReferenceQueue;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.LongConsumer;

/**
 * A Java owner of one native object, known to Rust by an opaque {@code long} handle.
 *
 * <p>Subclasses serialise their native calls on this object ({@code synchronized}) and pass
 * {@link #live()}; {@link #close()} frees the native object exactly once, after which every
 * call fails with a message naming what was closed instead of touching freed memory. An owner
 * that becomes unreachable without being closed is freed by a daemon thread that watches it through
 * a phantom reference (what Java 9's {@code Cleaner} does; the Spark 3.5 jars run on Java 8): a
 * safety net against leaks, not a substitute for {@code close()} (it runs late, on that thread).
 */
abstract class NativeHandle implements AutoCloseable {
    private static final ReferenceQueue<NativeHandle> UNREACHABLE = new ReferenceQueue<>();
    /** The watches of owners not yet freed, kept reachable until they have run. */
    private static final Set<Watch> WATCHED = ConcurrentHashMap.newKeySet();

    static {
        Thread cleaner = new Thread(NativeHandle::freeUnreachable, "horovod-rs-native-cleaner");
        cleaner.setDaemon(true);
        cleaner.setContextClassLoader(null);    // pins no task's class loader
        cleaner.start();
    }

    private final String what;
    private final Owned owned;
    private final Watch watch;

    /**
     * @param free frees a handle; must not refer to this object (it also runs once this object
     *     is unreachable), so pass a static method such as {@code HorovodNative::closeListener}
     */
    NativeHandle(String what, long handle, LongConsumer free) {
        this.what = what;
        this.owned = new Owned(handle, free);
        this.watch = new Watch(this, owned);
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
        watch.clean();
    }

    private static void freeUnreachable() {
        while (true) {
            try {
                ((Watch) UNREACHABLE.remove()).clean();
            } catch (InterruptedException e) {
                return;
            } catch (RuntimeException e) {
                // A failed free leaks one object; the thread goes on freeing the others (as Cleaner's does).
            }
        }
    }

    /** Runs the owner's cleaning action once: on close, or once the owner is unreachable. */
    private static final class Watch extends PhantomReference<NativeHandle> {
        private final Owned owned;

        Watch(NativeHandle owner, Owned owned) {
            super(owner, UNREACHABLE);
            this.owned = owned;
            WATCHED.add(this);
        }

        void clean() {
            if (WATCHED.remove(this)) {
                owned.run();
            }
        }
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
