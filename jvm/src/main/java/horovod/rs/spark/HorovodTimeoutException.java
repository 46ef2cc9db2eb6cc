package horovod.rs.spark;

/** A rendezvous or collective waited longer than its deadline; the message names what for. */
public class HorovodTimeoutException extends HorovodException {
    private static final long serialVersionUID = 1L;

    public HorovodTimeoutException(String message) {
        super(message);
    }
}
