package horovod.rs.spark;

import java.util.Objects;

/**
 * One rank's native trainer: the model, its optimizer and the rank's training data, trained data
 * parallel through the rank's engine. The estimator drives it epoch by epoch, so the JVM side
 * keeps what it is good at (the Store, logging, the Spark UI) and Rust keeps the tensors.
 *
 * <p>Internal: the public surface is for {@code horovod.rs.spark.ml} only.
 */
public final class NativeTrainer extends NativeHandle {
    /** The rank's engine: the trainer's collectives run on it, and it outlives the trainer. */
    private final NativeEngine engine;

    private NativeTrainer(long handle, NativeEngine engine) {
        super("trainer", handle, HorovodNative::trainerClose);
        this.engine = engine;
    }

    /**
     * A trainer for this rank. Every rank must call it (it agrees on row counts and broadcasts
     * rank 0's initial state, or the checkpoint's). The table is consumed: its rows move into the
     * trainer and {@code table} is closed.
     *
     * @param checkpoint a checkpoint of an earlier run to resume from, or null to start afresh
     */
    public static NativeTrainer create(HorovodContext ctx, NativeTable table, String modelSpecJson,
            String trainConfigJson, byte[] checkpoint) {
        Objects.requireNonNull(ctx, "ctx must not be null");
        Objects.requireNonNull(table, "table must not be null");
        NativeEngine engine = ctx.engine();
        return new NativeTrainer(HorovodNative.trainerCreate(engine.live(), table.release(), modelSpecJson,
                trainConfigJson, checkpoint), engine);
    }

    /** Trains one epoch on every rank; returns its report as JSON. */
    public synchronized String runEpoch() {
        return HorovodNative.trainerRunEpoch(live(), engine.live());
    }

    /** Whether the configured epochs are done or early stopping ended training. */
    public synchronized boolean done() {
        return HorovodNative.trainerDone(live());
    }

    /** Everything a later run needs to resume exactly where this one is. */
    public synchronized byte[] checkpoint() {
        return HorovodNative.trainerCheckpoint(live());
    }

    /** The model to keep: the best by the monitored metric, else the last weights. */
    public synchronized byte[] modelBytes() {
        return HorovodNative.trainerModel(live());
    }

    /** The per-epoch reports so far, as a JSON array. */
    public synchronized String historyJson() {
        return HorovodNative.trainerHistory(live());
    }
}
