package horovod.rs.spark;

/** A rank that joined its job: its engine, and where it sits among the job's ranks. */
final class JoinedRank {
    final NativeEngine engine;
    /** How many ranks before this one share its host, and how many share it. */
    final int localRank;
    final int localSize;
    /** How many ranks before this one have its local rank, and how many have it. */
    final int crossRank;
    final int crossSize;

    private JoinedRank(long[] joined) {
        this.engine = new NativeEngine(joined[0]);
        this.localRank = Math.toIntExact(joined[1]);
        this.localSize = Math.toIntExact(joined[2]);
        this.crossRank = Math.toIntExact(joined[3]);
        this.crossSize = Math.toIntExact(joined[4]);
    }

    /** Joins through the driver's rendezvous service ({@link RankSpec#throughService}). */
    static JoinedRank throughService(String spec, byte[] secret) {
        return new JoinedRank(HorovodNative.join(0, spec, secret));
    }

    /** Joins on {@code listener}, a handle the native side consumes ({@link NativeListener#join}). */
    static JoinedRank onListener(long listener, String spec, byte[] secret) {
        return new JoinedRank(HorovodNative.join(listener, spec, secret));
    }
}
