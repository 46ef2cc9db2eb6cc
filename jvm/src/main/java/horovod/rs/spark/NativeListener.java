package horovod.rs.spark;

/**
 * A rank's rendezvous listener, bound before the ranks exchange addresses (with Spark's barrier
 * {@code allGather}) and used up by joining the job.
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
