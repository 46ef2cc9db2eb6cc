package horovod.rs.spark;

import java.io.PrintWriter;
import java.io.Serializable;
import java.io.StringWriter;

/**
 * What one rank sends back to the driver: its result, or how it failed.
 *
 * <p>A failure travels as text (class, message, stack trace), not as the Throwable itself, since
 * user exceptions need not be serializable and a failed result must never fail the Spark task:
 * Spark would retry the whole barrier stage for what is the user's error. Whether a failure only
 * followed another rank's is asked on the driver, so that reporting one never needs the native
 * library on the executor.
 */
final class RankOutcome implements Serializable {
    private static final long serialVersionUID = 2L;

    final int rank;
    final Object result;
    final String failureClass;
    final String failureMessage;
    final String failureTrace;
    /** The failure's innermost cause as {@code class: message}. */
    final String rootCause;

    private RankOutcome(int rank, Object result, String failureClass, String failureMessage,
            String failureTrace, String rootCause) {
        this.rank = rank;
        this.result = result;
        this.failureClass = failureClass;
        this.failureMessage = failureMessage;
        this.failureTrace = failureTrace;
        this.rootCause = rootCause;
    }

    static RankOutcome success(int rank, Object result) {
        return new RankOutcome(rank, result, null, null, null, null);
    }

    static RankOutcome failure(int rank, Throwable error) {
        StringWriter trace = new StringWriter();
        error.printStackTrace(new PrintWriter(trace));
        Throwable root = rootCause(error);
        return new RankOutcome(rank, null, error.getClass().getName(), String.valueOf(error.getMessage()),
                trace.toString(), root.getClass().getName() + ": " + root.getMessage());
    }

    boolean failed() {
        return failureClass != null;
    }

    /** True when this rank failed only because another rank failed or left first (native/core's launch::failure). */
    boolean followsPeer() {
        return failed() && HorovodNative.followsPeer(rootCause);
    }

    private static Throwable rootCause(Throwable error) {
        Throwable cause = error;
        while (cause.getCause() != null && cause.getCause() != cause) {
            cause = cause.getCause();
        }
        return cause;
    }
}
