package horovod.rs.spark.ml;

import java.io.Serializable;

/**
 * What one rank reports after training: its row counts and a digest of its final weights; rank 0
 * also sends the weights and the history. The driver checks that every digest is the same. An
 * attempt that stopped after an epoch to run again on more ranks reports only that
 * ({@link #regrowing}).
 */
final class FitResult implements Serializable {
    private static final long serialVersionUID = 1L;

    private final int rank;
    private final long rows;
    private final long droppedRows;
    private final String weightsDigest;
    private final byte[] model;
    private final String historyJson;
    private final boolean regrow;

    FitResult(int rank, long rows, long droppedRows, String weightsDigest, byte[] model, String historyJson) {
        this(rank, rows, droppedRows, weightsDigest, model, historyJson, false);
    }

    private FitResult(int rank, long rows, long droppedRows, String weightsDigest, byte[] model, String historyJson,
            boolean regrow) {
        this.rank = rank;
        this.rows = rows;
        this.droppedRows = droppedRows;
        this.weightsDigest = weightsDigest;
        this.model = model;
        this.historyJson = historyJson;
        this.regrow = regrow;
    }

    /** A rank's report of an attempt that stopped after its epoch's checkpoint to run again on more ranks. */
    static FitResult regrowing(int rank, long rows, long droppedRows) {
        return new FitResult(rank, rows, droppedRows, null, null, null, true);
    }

    boolean regrow() {
        return regrow;
    }

    int rank() {
        return rank;
    }

    long rows() {
        return rows;
    }

    long droppedRows() {
        return droppedRows;
    }

    String weightsDigest() {
        return weightsDigest;
    }

    byte[] model() {
        return model;
    }

    String historyJson() {
        return historyJson;
    }
}
