package horovod.rs.spark.shim;

import org.apache.spark.ml.param.Params;
import org.apache.spark.ml.util.DefaultParamsReader;
import org.apache.spark.ml.util.DefaultParamsReader$;
import org.apache.spark.ml.util.DefaultParamsWriter$;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;

/**
 * What differs between the Spark lines, for Spark 4.x: the one class with a copy per line
 * (jvm/src/spark3.5 has the other; build.gradle compiles the line's copy into its jar).
 *
 * <p>Spark 4 split {@code Dataset} and {@code SparkSession} into APIs and their classic (in-JVM)
 * implementations, which alone reach the query's internal rows; and Spark ML's metadata helpers
 * take a SparkSession. Not part of the public API.
 */
public final class SparkShim {
    private SparkShim() {}

    /** The rows of {@code data} as Spark holds them, without converting each to a {@link Row}. */
    public static RDD<InternalRow> internalRows(Dataset<?> data) {
        return classic(data).queryExecution().toRdd();
    }

    /** A DataFrame of internal rows laid out as {@code schema}: the way back from {@link #internalRows}. */
    public static Dataset<Row> dataFrame(SparkSession spark, RDD<InternalRow> rows, StructType schema) {
        return classic(spark).internalCreateDataFrame(rows, schema, false);
    }

    /** Writes Spark ML's params metadata of {@code instance} under {@code path}. */
    public static void saveMetadata(Params instance, String path, SparkSession spark) {
        DefaultParamsWriter$.MODULE$.saveMetadata(instance, path, spark);
    }

    /** Reads the params metadata {@link #saveMetadata} wrote, checking that it is of {@code className}. */
    public static DefaultParamsReader.Metadata loadMetadata(String path, SparkSession spark, String className) {
        return DefaultParamsReader$.MODULE$.loadMetadata(path, spark, className);
    }

    private static org.apache.spark.sql.classic.Dataset<?> classic(Dataset<?> data) {
        if (data instanceof org.apache.spark.sql.classic.Dataset<?> classic) {
            return classic;
        }
        throw new IllegalArgumentException(NOT_CLASSIC + data.getClass().getName());
    }

    private static org.apache.spark.sql.classic.SparkSession classic(SparkSession spark) {
        if (spark instanceof org.apache.spark.sql.classic.SparkSession classic) {
            return classic;
        }
        throw new IllegalArgumentException(NOT_CLASSIC + spark.getClass().getName());
    }

    private static final String NOT_CLASSIC = "horovod-rs runs in the Spark driver's JVM and needs a classic "
            + "(not a Spark Connect) session; got ";
}
