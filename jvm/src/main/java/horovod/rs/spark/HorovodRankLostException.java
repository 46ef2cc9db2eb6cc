package horovod.rs.spark;

/**
 * Spark aborted a job's barrier stage for a reason outside the ranks' code: an executor was lost
 * or killed, or its process died. Running the job again may succeed; an estimator with a store
 * resumes from its last checkpoint ({@code spark.horovod.rs.fitAttempts}).
 */
public class HorovodRankLostException extends HorovodException {
    private static final long serialVersionUID = 1L;

    public HorovodRankLostException(String message, Throwable cause) {
        super(message, cause);
    }

    /**
     * Whether Spark's failure of a stage says a task was lost with its executor, not failed by its
     * own code, in Spark's words as native/core's {@code launch::failure} knows them.
     */
    static boolean isRankLost(Throwable sparkFailure) {
        for (Throwable t = sparkFailure; t != null; t = t.getCause()) {
            if (HorovodNative.rankLost(String.valueOf(t.getMessage()))) {
                return true;
            }
        }
        return false;
    }
}
