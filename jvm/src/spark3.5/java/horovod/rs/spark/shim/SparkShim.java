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
 * What differs between the Spark lines, for Spark 3.5 (Scala 2.12 and 2.13): the one class with
 * a copy per line (jvm/src/spark4 has the other; build.gradle compiles the line's copy into its jar).
 *
 * <p>In Spark 3.5 {@code Dataset} and {@code SparkSession} are the in-JVM classes themselves, and
 * Spark ML's metadata helpers take a SparkContext. Not part of the public API.
 */
public final class SparkShim {
    private SparkShim() {}

    /** The rows of {@code data} as Spark holds them, without converting each to a {@link Row}. */
    public static RDD<InternalRow> internalRows(Dataset<?> data) {
        return data.queryExecution().toRdd();
    }

    /** A DataFrame of internal rows laid out as {@code schema}: the way back from {@link #internalRows}. */
    public static Dataset<Row> dataFrame(SparkSession spark, RDD<InternalRow> rows, StructType schema) {
        return spark.internalCreateDataFrame(rows, schema, false);
    }

    /** Writes Spark ML's params metadata of {@code instance} under {@code path}. */
    public static void saveMetadata(Params instance, String path, SparkSession spark) {
        DefaultParamsWriter$.MODULE$.saveMetadata(instance, path, spark.sparkContext(),
                DefaultParamsWriter$.MODULE$.saveMetadata$default$4(),
                DefaultParamsWriter$.MODULE$.saveMetadata$default$5());
    }

    /** Reads the params metadata {@link #saveMetadata} wrote, checking that it is of {@code className}. */
    public static DefaultParamsReader.Metadata loadMetadata(String path, SparkSession spark, String className) {
        return DefaultParamsReader$.MODULE$.loadMetadata(path, spark.sparkContext(), className);
    }
}
