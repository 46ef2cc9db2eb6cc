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

    synchronized float[] allreduce(float[] data, ReduceOp op) {
        return HorovodNative.allreduceFloat(live(), data, op.name());
    }

    synchronized double[] allreduce(double[] data, ReduceOp op) {
        return HorovodNative.allreduceDouble(live(), data, op.name());
    }

    synchronized void barrier() {
        HorovodNative.barrier(live());
    }

    @Override
    void free(long handle) {
        HorovodNative.closeCommunicator(handle);
    }
}
