package horovod.rs.spark;

/**
 * A job's rendezvous service, on the driver or in rank 0's task: ranks register their listener
 * addresses with it and get everyone's back as soon as the last rank registers.
 *
 * <p>It replaces {@code BarrierTaskContext.allGather} for the exchange, which costs a second per
 * job because Spark polls barrier RPCs with a one-second sleep. Connections to it are
 * authenticated with the job's secret, like connections between ranks.
 */
final class RendezvousService extends NativeHandle {
    private RendezvousService(long handle) {
        super("rendezvous service", handle, HorovodNative::stopRendezvousService);
    }

    static RendezvousService start(byte[] secret, int size) {
        NativeLibrary.load();
        return new RendezvousService(HorovodNative.startRendezvousService("0.0.0.0:0", secret, size));
    }

    /** Rank 0's service, where the driver hosts none: on the first free port of the job's. */
    static RendezvousService forRankZero(byte[] secret, int size) {
        NativeLibrary.load();
        return new RendezvousService(HorovodNative.startRankZeroRendezvousService(secret, size));
    }

    synchronized int port() {
        return HorovodNative.rendezvousServicePort(live());
    }
}
