package horovod.rs.spark;

import java.util.List;

/**
 * One rank's connections to all other ranks, owned by Java through a native handle until an
 * engine takes them over ({@link #startEngine}).
 *
 * <p>{@link #close()} frees the native side once; the other ranks then fail fast instead of
 * waiting for this one.
 */
final class NativeCommunicator extends NativeHandle {
    private NativeCommunicator(long handle) {
        super("communicator", handle, HorovodNative::closeCommunicator);
    }

    /** Rendezvous listener: bound before the addresses are exchanged, consumed by connect. */
    static final class Listener extends NativeHandle {
        Listener(String bindAddress) {
            super("rendezvous listener", HorovodNative.listen(bindAddress), HorovodNative::closeListener);
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
    }

    /**
     * Starts this rank's engine on these connections; the engine's thread owns them from then on,
     * and this communicator is used up whether this succeeds or not.
     *
     * @param config the engine's knobs as {@link HorovodRunOptions#engineConfig()} renders them
     */
    synchronized NativeEngine startEngine(String config) {
        return new NativeEngine(HorovodNative.engineStart(release(), config));
    }
}
