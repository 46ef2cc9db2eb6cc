package horovod.rs.spark;

/**
 * The only class with {@code native} methods: the gateway to the Rust engine (native/jni).
 *
 * <p>Native objects are opaque {@code long} handles owned by the Java wrappers
 * ({@link NativeCommunicator}); each wrapper serialises calls on its handle and closes it once.
 * Errors arrive as {@link HorovodException} (or a subclass) carrying the Rust error's message.
 */
final class HorovodNative {
    static {
        NativeLibrary.load();
    }

    private HorovodNative() {}

    /** Binds a rendezvous listener, e.g. on {@code "0.0.0.0:0"}; returns its handle. */
    static native long listen(String bindAddress);

    static native int listenerPort(long listener);

    static native void closeListener(long listener);

    /**
     * Connects this rank to all others; consumes the listener handle even when it fails.
     *
     * @param addresses one {@code host:port} per rank, in rank order, separated by newlines
     */
    static native long connect(
            long listener, int rank, String addresses, byte[] secret, long connectTimeoutMs, long ioTimeoutMs);

    /** Starts the driver's rendezvous service for a job of {@code size} ranks; returns its handle. */
    static native long startRendezvousService(String bindAddress, byte[] secret, int size);

    static native int rendezvousServicePort(long service);

    static native void stopRendezvousService(long service);

    /**
     * Registers this rank's entry with the driver's service and waits for every rank's.
     *
     * @return the entries in rank order, separated by newlines
     */
    static native String exchangeEntries(String serviceAddress, byte[] secret, int rank, int size, int attempt,
            String entry, long timeoutMs);

    static native void closeCommunicator(long communicator);

    static native void barrier(long communicator);

    /*
     * The collectives take a byte[], int[], long[], float[] or double[] as data and return a new
     * array of the same type.
     */

    static native Object allreduce(long communicator, Object data, String op, double prescale, double postscale);

    static native Object broadcast(long communicator, Object data, int root);

    static native Object allgather(long communicator, Object data);

    static native Object alltoall(long communicator, Object data, int[] splits);

    static native Object reducescatter(long communicator, Object data, String op);
}
