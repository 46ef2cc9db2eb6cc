package horovod.rs.spark;

/** A horovod-rs operation failed; the message says what and, where it matters, which rank. */
public class HorovodException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public HorovodException(String message) {
        super(message);
    }

    public HorovodException(String message, Throwable cause) {
        super(message, cause);
    }
}
