package horovod.rs.spark.ml;

import java.io.Serializable;

/**
 * What one rank reports after training: its row counts and a digest of its final weights; rank 0
 * also sends the weights and the history. The driver checks that every digest is the same.
 */
final class FitResult implements Serializable {
    private static final long serialVersionUID = 1L;

    private final int rank;
    private final long rows;
    private final long droppedRows;
    private final String weightsDigest;
    private final byte[] model;
    private final String historyJson;

    FitResult(int rank, long rows, long droppedRows, String weightsDigest, byte[] model, String historyJson) {
        this.rank = rank;
        this.rows = rows;
        this.droppedRows = droppedRows;
        this.weightsDigest = weightsDigest;
        this.model = model;
        this.historyJson = historyJson;
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
