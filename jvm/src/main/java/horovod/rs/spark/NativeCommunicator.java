package horovod.rs.spark;

import java.util.List;

/**
 * One rank's connections to all other ranks, owned by Java through a native handle.
 *
 * <p>Calls are serialised on this object; {@link #close()} frees the native side once, and the
 * other ranks blocked on a collective with this one then fail fast instead of waiting.
 */
final class NativeCommunicator extends NativeHandle {
    private NativeCommunicator(long handle) {
        super("communicator (collectives are only possible inside the rank function)", handle);
    }

    /** Rendezvous listener: bound before the addresses are exchanged, consumed by connect. */
    static final class Listener extends NativeHandle {
        Listener(String bindAddress) {
            super("rendezvous listener", HorovodNative.listen(bindAddress));
        }

        synchronized int port() {
            return HorovodNative.listenerPort(live());
        }

        /** Connects to every rank; the listener is used up whether this succeeds or not. */
        synchronized NativeCommunicator connect(
                int rank, List<String> addresses, byte[] secret, long connectTimeoutMs, long ioTimeoutMs) {
            return new NativeCommunicator(HorovodNative.connect(
                    release(), rank, String.join("\n", addresses), secret, connectTimeoutMs, ioTimeoutMs));
        }

        @Override
        void free(long handle) {
            HorovodNative.closeListener(handle);
        }
    }

    /*
     * The collectives take a byte[], int[], long[], float[] or double[] as data and return a new
     * array of the same type; arguments are checked by HorovodContext.
     */

    synchronized <A> A allreduce(A data, ReduceOp op, double prescale, double postscale) {
        return sameType(data, HorovodNative.allreduce(live(), data, op.name(), prescale, postscale));
    }

    synchronized <A> A broadcast(A data, int root) {
        return sameType(data, HorovodNative.broadcast(live(), data, root));
    }

    synchronized <A> A allgather(A data) {
        return sameType(data, HorovodNative.allgather(live(), data));
    }

    synchronized <A> A alltoall(A data, int[] splits) {
        return sameType(data, HorovodNative.alltoall(live(), data, splits));
    }

    synchronized <A> A reducescatter(A data, ReduceOp op) {
        return sameType(data, HorovodNative.reducescatter(live(), data, op.name()));
    }

    /** The native side returns an array of its input's class; this checks it and types it so. */
    @SuppressWarnings("unchecked")
    private static <A> A sameType(A data, Object result) {
        return (A) data.getClass().cast(result);
    }

    synchronized void barrier() {
        HorovodNative.barrier(live());
    }

    @Override
    void free(long handle) {
        HorovodNative.closeCommunicator(handle);
    }
}
