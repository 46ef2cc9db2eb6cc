package horovod.rs.spark.ml;

import horovod.rs.spark.HorovodContext;
import horovod.rs.spark.Lists;
import horovod.rs.spark.NativeTable;
import horovod.rs.spark.NativeTrainer;
import horovod.rs.spark.PartitionFunction;
import horovod.rs.spark.store.Store;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;

/**
 * One rank of a fit: its partition into a native table, the table into the trainer, then epochs
 * until the trainer is done. Rank 0 writes the checkpoint and the history to the store after every
 * epoch (so a later fit with the same run id resumes, and the driver shows progress), and the
 * final model at the end. An attempt on fewer ranks than the fit wants stops after the epoch in
 * which the driver wrote its regrow marker to the store (the cluster has the slots again): rank 0
 * looks for it after each checkpoint and its answer is broadcast, so every rank stops alike.
 */
final class FitRank implements PartitionFunction<InternalRow, FitResult> {
    private static final long serialVersionUID = 1L;

    private final StructType schema;
    private final List<String> columns;
    private final List<String> labelColumns;
    private final boolean dropInvalidRows;
    private final String modelSpec;
    private final String trainConfig;
    /** Null when the fit has no store. */
    private final Store store;
    private final String runId;
    /** The store file whose existence asks this attempt to stop after its epoch; null: never asked. */
    private final String regrowMarker;

    FitRank(StructType schema, List<String> columns, List<String> labelColumns, boolean dropInvalidRows,
            String modelSpec, String trainConfig, Store store, String runId) {
        this(schema, columns, labelColumns, dropInvalidRows, modelSpec, trainConfig, store, runId, null);
    }

    private FitRank(StructType schema, List<String> columns, List<String> labelColumns, boolean dropInvalidRows,
            String modelSpec, String trainConfig, Store store, String runId, String regrowMarker) {
        this.schema = schema;
        this.columns = Lists.copyOf(columns);
        this.labelColumns = Lists.copyOf(labelColumns);
        this.dropInvalidRows = dropInvalidRows;
        this.modelSpec = modelSpec;
        this.trainConfig = trainConfig;
        this.store = store;
        this.runId = runId;
        this.regrowMarker = regrowMarker;
    }

    /** This rank for an attempt that stops after its epoch once {@code marker} is in the store. */
    FitRank regrowingOn(String marker) {
        if (store == null) {
            throw new IllegalStateException("a fit without a store has no checkpoint to grow back from");
        }
        return new FitRank(schema, columns, labelColumns, dropInvalidRows, modelSpec, trainConfig, store, runId,
                marker);
    }

    @Override
    public FitResult call(HorovodContext ctx, Iterator<InternalRow> partition) {
        boolean writer = ctx.rank() == 0 && store != null;
        NativeTable table = NativeTable.fromRows(partition, schema, columns, labelColumns, dropInvalidRows,
                Long.MAX_VALUE);
        long rows = table.rows();
        long dropped = table.droppedRows();
        // Rank 0's state (fresh or resumed) goes to every rank, so only rank 0 reads the checkpoint.
        byte[] checkpoint = writer ? store.read(store.runFile(runId, Store.CHECKPOINT)).orElse(null) : null;
        try (NativeTrainer trainer = NativeTrainer.create(ctx, table, modelSpec, trainConfig, checkpoint)) {
            while (!trainer.done()) {
                trainer.runEpoch();
                if (writer) {
                    store.write(store.runFile(runId, Store.CHECKPOINT), trainer.checkpoint());
                    store.write(store.runFile(runId, Store.HISTORY),
                            trainer.historyJson().getBytes(StandardCharsets.UTF_8));
                }
                if (regrowMarker != null && !trainer.done() && asked(ctx)) {
                    return FitResult.regrowing(ctx.rank(), rows, dropped);
                }
            }
            byte[] model = trainer.modelBytes();
            if (writer) {
                store.write(store.runFile(runId, Store.MODEL), model);
            }
            boolean first = ctx.rank() == 0;
            return new FitResult(ctx.rank(), rows, dropped, sha256(model), first ? model : null,
                    first ? trainer.historyJson() : null);
        } finally {
            table.close();
        }
    }

    /** Whether the driver asked this attempt to stop: rank 0's look at the store, on every rank. */
    private boolean asked(HorovodContext ctx) {
        int[] asked = {ctx.rank() == 0 && store.exists(regrowMarker) ? 1 : 0};
        return ctx.broadcast(asked, 0)[0] == 1;
    }

    private static String sha256(byte[] bytes) {
        try {
            return String.format("%064x", new BigInteger(1, MessageDigest.getInstance("SHA-256").digest(bytes)));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java runtime has SHA-256", e);
        }
    }
}
