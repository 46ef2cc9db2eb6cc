package horovod.rs.spark;

/**
 * The connection to another rank broke during a collective, usually because that rank failed
 * or its executor died, or another rank stopped every rank's engine (its function returned or
 * threw). The other rank's own error is the root cause; this one is a consequence.
 */
public class HorovodPeerLostException extends HorovodException {
    private static final long serialVersionUID = 1L;

    public HorovodPeerLostException(String message) {
        super(message);
    }
}
