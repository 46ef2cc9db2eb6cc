package horovod.rs.spark;

import java.io.PrintWriter;
import java.io.Serializable;
import java.io.StringWriter;

/**
 * What one rank sends back to the driver: its result, or how it failed.
 *
 * <p>A failure travels as text (class, message, stack trace), not as the Throwable itself, since
 * user exceptions need not be serializable and a failed result must never fail the Spark task:
 * Spark would retry the whole barrier stage for what is the user's error.
 */
final class RankOutcome implements Serializable {
    private static final long serialVersionUID = 1L;

    final int rank;
    final Object result;
    final String failureClass;
    final String failureMessage;
    final String failureTrace;
    /** True when this rank failed only because another rank went away first. */
    final boolean peerLost;

    private RankOutcome(int rank, Object result, String failureClass, String failureMessage,
            String failureTrace, boolean peerLost) {
        this.rank = rank;
        this.result = result;
        this.failureClass = failureClass;
        this.failureMessage = failureMessage;
        this.failureTrace = failureTrace;
        this.peerLost = peerLost;
    }

    static RankOutcome success(int rank, Object result) {
        return new RankOutcome(rank, result, null, null, null, false);
    }

    static RankOutcome failure(int rank, Throwable error) {
        StringWriter trace = new StringWriter();
        error.printStackTrace(new PrintWriter(trace));
        return new RankOutcome(rank, null, error.getClass().getName(), String.valueOf(error.getMessage()),
                trace.toString(), rootCause(error) instanceof HorovodPeerLostException);
    }

    boolean failed() {
        return failureClass != null;
    }

    private static Throwable rootCause(Throwable error) {
        Throwable cause = error;
        while (cause.getCause() != null && cause.getCause() != cause) {
            cause = cause.getCause();
        }
        return cause;
    }
}
