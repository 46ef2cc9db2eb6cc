package horovod.rs.spark;

/**
 * A Java owner of one native object, known to Rust by an opaque {@code long} handle.
 *
 * <p>Subclasses serialise their native calls on this object ({@code synchronized}) and pass
 * {@link #live()}; {@link #close()} frees the native object exactly once, after which every
 * call fails with a message naming what was closed instead of touching freed memory.
 */
abstract class NativeHandle implements AutoCloseable {
    private final String what;
    private long handle;

    NativeHandle(String what, long handle) {
        this.what = what;
        this.handle = handle;
    }

    /** The handle, for a native call; fails if the object is closed. */
    final synchronized long live() {
        if (handle == 0) {
            throw new IllegalStateException("the " + what + " is closed");
        }
        return handle;
    }

    /** Gives the handle up to a native call that consumes it; this object is closed afterwards. */
    final synchronized long release() {
        long released = live();
        handle = 0;
        return released;
    }

    /** Frees the native object behind {@code handle}. */
    abstract void free(long handle);

    @Override
    public final synchronized void close() {
        if (handle != 0) {
            free(release());
        }
    }
}
