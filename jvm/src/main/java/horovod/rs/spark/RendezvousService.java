package horovod.rs.spark;

/**
 * The driver's rendezvous service for one job: ranks register their listener addresses with it
 * and get everyone's back as soon as the last rank registers.
 *
 * <p>It replaces {@code BarrierTaskContext.allGather} for the exchange, which costs a second per
 * job because Spark polls barrier RPCs with a one-second sleep. Connections to it are
 * authenticated with the job's secret, like connections between ranks.
 */
final class RendezvousService implements AutoCloseable {
    private long handle;

    RendezvousService(byte[] secret, int size) {
        NativeLibrary.load();
        this.handle = HorovodNative.startRendezvousService("0.0.0.0:0", secret, size);
    }

    synchronized int port() {
        if (handle == 0) {
            throw new IllegalStateException("the rendezvous service is stopped");
        }
        return HorovodNative.rendezvousServicePort(handle);
    }

    @Override
    public synchronized void close() {
        if (handle != 0) {
            long service = handle;
            handle = 0;
            HorovodNative.stopRendezvousService(service);
        }
    }
}
