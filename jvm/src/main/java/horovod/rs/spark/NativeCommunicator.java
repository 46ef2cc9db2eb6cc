package horovod.rs.spark;

import java.util.List;

/**
 * One rank's connections to all other ranks, owned by Java through a native handle.
 *
 * <p>Calls are serialised on this object; {@link #close()} frees the native side once, and the
 * other ranks blocked on a collective with this one then fail fast instead of waiting.
 */
final class NativeCommunicator implements AutoCloseable {
    private long handle;

    private NativeCommunicator(long handle) {
        this.handle = handle;
    }

    /** Rendezvous listener: bound before the addresses are exchanged, consumed by connect. */
    static final class Listener implements AutoCloseable {
        private long handle;

        Listener(String bindAddress) {
            this.handle = HorovodNative.listen(bindAddress);
        }

        synchronized int port() {
            return HorovodNative.listenerPort(live());
        }

        /** Connects to every rank; the listener is used up whether this succeeds or not. */
        synchronized NativeCommunicator connect(
                int rank, List<String> addresses, byte[] secret, long connectTimeoutMs, long ioTimeoutMs) {
            long listener = live();
            handle = 0;
            return new NativeCommunicator(HorovodNative.connect(
                    listener, rank, String.join("\n", addresses), secret, connectTimeoutMs, ioTimeoutMs));
        }

        private long live() {
            if (handle == 0) {
                throw new IllegalStateException("the rendezvous listener is closed");
            }
            return handle;
        }

        @Override
        public synchronized void close() {
            if (handle != 0) {
                long listener = handle;
                handle = 0;
                HorovodNative.closeListener(listener);
            }
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

    private long live() {
        if (handle == 0) {
            throw new IllegalStateException("the communicator is closed: collectives are only possible inside the rank function");
        }
        return handle;
    }

    @Override
    public synchronized void close() {
        if (handle != 0) {
            long communicator = handle;
            handle = 0;
            HorovodNative.closeCommunicator(communicator);
        }
    }
}
