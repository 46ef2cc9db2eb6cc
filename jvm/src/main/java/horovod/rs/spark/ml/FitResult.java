package horovod.rs.spark.ml;

import java.io.Serializable;

/**
 * What one rank reports after training: its row counts and a digest of its final weights; rank 0
 * also sends the weights and the history. The driver checks that every digest is the same.
 */
record FitResult(int rank, long rows, long droppedRows, String weightsDigest, byte[] model, String historyJson)
        implements Serializable {}
