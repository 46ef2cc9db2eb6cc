package horovod.rs.spark;

/**
 * The only class with {@code native} methods: the gateway to the Rust engine (native/jni).
 *
 * <p>Native objects are opaque {@code long} handles owned by the Java wrappers
 * ({@link NativeHandle} subclasses); each wrapper serialises calls on its handle and closes it once.
 * Errors arrive as {@link HorovodException} (or a subclass) carrying the Rust error's message.
 */
final class HorovodNative {
    static {
        NativeLibrary.load();
        NativeLogForwarder.start();
    }

    private HorovodNative() {}

    /** Sends the native log records to {@link #nextLogRecord} ({@code true}) or to standard error. */
    static native void forwardLogs(boolean on);

    /** Lets native records at or above {@code level} (trace, debug, info, warning, error, off) through. */
    static native void setLogLevel(String level);

    /**
     * The next forwarded native log record as {@code level \t rank \t target \t message} (rank
     * empty when no engine thread logged it), or an empty string when none came in time.
     */
    static native String nextLogRecord(long timeoutMs);

    /** Binds a rendezvous listener, e.g. on {@code "0.0.0.0:0"}; returns its handle. */
    static native long listen(String bindAddress);

    static native int listenerPort(long listener);

    static native void closeListener(long listener);

    /**
     * Joins the job: exchanges addresses, connects to every rank, starts the engine.
     *
     * @param listener this rank's listener, consumed even when joining fails; 0 when joining through
     *     the driver's service, which binds one itself
     * @param spec the rank's {@link RankSpec} as JSON
     * @return the engine's handle, then the local rank, local size, cross rank and cross size
     */
    static native long[] join(long listener, String spec, byte[] secret);

    // The table of settings and the words of failures (native/jni/src/settings_exports.rs).

    /**
     * Every setting of the native table as a JSON array of {@code {"key", "variable", "default",
     * "doc"}} ({@code variable} null where Horovod has none), in the table's order.
     */
    static native String settingTable();

    /**
     * A job's settings from {@code keys} (Spark conf keys) and {@code variables} (Horovod's), each a
     * JSON object of strings, as {@code {"spec": {the rank-spec fields set}, "driver": {...}}};
     * throws {@link IllegalArgumentException} naming a bad key or variable and its value.
     */
    static native String jobSettings(String keys, String variables);

    /** The rank-spec fields in {@code fields} (a JSON object) with every default filled. */
    static native String specWithDefaults(String fields);

    /** Whether Spark's failure {@code text} says a task was lost with its executor. */
    static native boolean rankLost(String text);

    /** Whether a rank's error {@code text} only follows another rank's failure. */
    static native boolean followsPeer(String text);

    /** Starts the driver's rendezvous service for a job of {@code size} ranks; returns its handle. */
    static native long startRendezvousService(String bindAddress, byte[] secret, int size);

    /** Starts rank 0's rendezvous service, on the first free port of the job's; returns its handle. */
    static native long startRankZeroRendezvousService(byte[] secret, int size);

    /** Where a rank registers with rank 0's service on {@code host}: the candidates, comma-separated. */
    static native String rankZeroCandidates(String host, byte[] secret);

    static native int rendezvousServicePort(long service);

    static native void stopRendezvousService(long service);

    /** Stops the engine on every rank and waits for this rank's engine thread. */
    static native void engineClose(long engine);

    /** As {@link #engineClose}, telling the other ranks why this one leaves. */
    static native void engineLeave(long engine, String reason);

    /** Why a rank leaves its job now: its function returned ({@code error} null) or failed with it. */
    static native String departure(String error);

    /*
     * Submissions take a byte[], int[], long[], float[] or double[] as data and return a tensor
     * handle at once; the result is a new array of the same type (an empty byte[] for a barrier).
     */

    static native long submitAllreduce(long engine, String name, Object data, String op, double prescale,
            double postscale);

    static native long submitBroadcast(long engine, String name, Object data, int root);

    static native long submitAllgather(long engine, String name, Object data);

    static native long submitAlltoall(long engine, String name, Object data, int[] splits);

    static native long submitReducescatter(long engine, String name, Object data, String op);

    static native long submitBarrier(long engine, String name);

    /** The tensor's result, or null while it is in flight; throws its error. */
    static native Object tensorPoll(long tensor);

    /** Waits at most {@code timeoutMs} for the tensor's result; null if it is still in flight. */
    static native Object tensorWait(long tensor, long timeoutMs);

    /** Frees a tensor handle, done or not. */
    static native void tensorFree(long tensor);

    // The trainer (native/train through native/jni/src/train_exports.rs).

    /** Consumes the table; returns a trainer handle. Collective: every rank calls it. */
    static native long trainerCreate(long engine, long table, String modelSpec, String trainConfig, byte[] checkpoint);

    /** Collective: every rank calls it for each epoch. */
    static native String trainerRunEpoch(long trainer, long engine);

    static native boolean trainerDone(long trainer);

    static native byte[] trainerCheckpoint(long trainer);

    static native byte[] trainerModel(long trainer);

    static native String trainerHistory(long trainer);

    static native void trainerClose(long trainer);

    static native long predictorCreate(String modelSpec, byte[] model);

    /** Every output's values for every row, output after output. */
    static native float[] predictorPredict(long predictor, long table);

    static native int[] predictorOutputWidths(long predictor);

    static native void predictorClose(long predictor);

    static native String specDescribe(String modelSpec);

    // Training data (native/jni/src/table_exports.rs).

    /** An empty table; {@code names} one per line. */
    static native long tableCreate(String names, int[] widths);

    /**
     * Copies the first {@code rows} rows of {@code batch}: the columns' values one column after
     * another, each in a slot of {@code capacityRows * width} values.
     */
    static native void tableAppendBatch(long table, float[] batch, int capacityRows, int rows);

    static native long tableRows(long table);

    static native float[] tableColumn(long table, String column);

    static native void tableClose(long table);
}
