package horovod.rs.spark;

/**
 * A rank's function threw. The message names the rank and carries its exception's class and
 * message; {@link #remoteStackTrace()} has the stack trace from the executor.
 */
public class HorovodJobFailedException extends HorovodException {
    private static final long serialVersionUID = 1L;

    private final int rank;
    private final String remoteClassName;
    private final String remoteStackTrace;

    HorovodJobFailedException(int rank, int size, String remoteClassName, String remoteMessage,
            String remoteStackTrace) {
        super("rank " + rank + " of " + size + " failed: " + remoteClassName + ": " + remoteMessage
                + "\nremote stack trace:\n" + remoteStackTrace);
        this.rank = rank;
        this.remoteClassName = remoteClassName;
        this.remoteStackTrace = remoteStackTrace;
    }

    /** The rank whose failure is the root cause of the job's failure. */
    public int rank() {
        return rank;
    }

    /** The class name of the exception the rank threw. */
    public String remoteClassName() {
        return remoteClassName;
    }

    public String remoteStackTrace() {
        return remoteStackTrace;
    }
}
