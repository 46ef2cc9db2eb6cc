package horovod.rs.spark;

/**
 * A rank's rendezvous listener, for a job whose ranks' addresses the caller exchanges itself (the
 * tests' loopback ranks; Spark tasks join through a rendezvous service), used up by joining.
 */
final class NativeListener extends NativeHandle {
    NativeListener(String bindAddress) {
        super("rendezvous listener", HorovodNative.listen(bindAddress), HorovodNative::closeListener);
    }

    synchronized int port() {
        return HorovodNative.listenerPort(live());
    }

    /**
     * Joins the job {@code spec} describes ({@link RankSpec#withEntries}); the listener is used up
     * whether this succeeds or not.
     */
    synchronized JoinedRank join(String spec, byte[] secret) {
        return JoinedRank.onListener(release(), spec, secret);
    }
}
