package horovod.rs.spark.ml;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import horovod.rs.spark.shim.SparkShim;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.ml.Model;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.param.StringArrayParam;
import org.apache.spark.ml.util.DefaultParamsReader;
import org.apache.spark.ml.util.Identifiable$;
import org.apache.spark.ml.util.MLReadable;
import org.apache.spark.ml.util.MLReader;
import org.apache.spark.ml.util.MLWritable;
import org.apache.spark.ml.util.MLWriter;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;

/**
 * A model fitted by {@link HorovodEstimator}: {@code transform(df)} appends one column per model
 * output (a double for a single value, a vector otherwise), computed by native inference on the
 * executors in batches. Saves and loads with Spark ML's persistence, so it round-trips
 * through {@code Pipeline.save}/{@code PipelineModel.load}: params as Spark's metadata, weights and
 * history as files under {@code data/}.
 *
 * <p>Spark ML on Spark Connect (Spark 4.0+) serves it to Connect clients: the server keeps the
 * models it fits for the client that asked, and loads saved ones only because the jar registers
 * the class for {@link java.util.ServiceLoader} (META-INF/services).
 */
public final class HorovodModel extends Model<HorovodModel> implements ModelParams, MLWritable {
    private static final long serialVersionUID = 1L;
    private static final ObjectMapper JSON = new ObjectMapper();
    /** Rows per native inference call: large enough to amortise the call, small enough for memory. */
    private static final int BATCH_ROWS = 4096;

    private final String uid;
    private final byte[] weights;
    private final String historyJson;
    private final StringArrayParam featureCols;
    private final StringArrayParam outputCols;
    private final Param<String> modelSpec;

    /**
     * A model without weights, there only because {@link java.util.ServiceLoader} needs a public
     * no-argument constructor to list a registered class; Spark ML on Connect lists them all, so a
     * class without one would break every Spark ML call on the server. Models to use come from
     * {@link HorovodEstimator#fit} and {@link #load}.
     */
    public HorovodModel() {
        this(Identifiable$.MODULE$.randomUID("HorovodModel"), new byte[0], null);
    }

    HorovodModel(String uid, byte[] weights, String historyJson) {
        this.uid = uid;
        this.weights = weights.clone();
        this.historyJson = historyJson == null ? "[]" : historyJson;
        featureCols = new StringArrayParam(this, "featureCols", "feature columns, in the model's input order");
        outputCols = new StringArrayParam(this, "outputCols", "columns transform adds, one per model output");
        modelSpec = new Param<>(this, "modelSpec", "the model, as model-spec JSON");
        setDefault(featureCols, new String[0]);
        setDefault(outputCols, new String[0]);
    }

    public static MLReader<HorovodModel> read() {
        return new Reader();
    }

    public static HorovodModel load(String path) {
        return read().load(path);
    }

    @Override
    public String uid() {
        return uid;
    }

    @Override public StringArrayParam featureCols() { return featureCols; }
    @Override public StringArrayParam outputCols() { return outputCols; }
    @Override public Param<String> modelSpec() { return modelSpec; }

    public HorovodModel setFeatureCols(String[] value) { set(featureCols, value); return this; }
    public HorovodModel setOutputCols(String[] value) { set(outputCols, value); return this; }
    HorovodModel setModelSpec(String value) { set(modelSpec, value); return this; }

    /** The trained weights, as the native trainer saved them. */
    public byte[] getWeights() {
        return weights.clone();
    }

    /** Per-epoch reports of the fit, as JSON (the format of docs/model-spec.md). */
    public String getHistoryJson() {
        return historyJson;
    }

    /**
     * Per-epoch metrics, one map per epoch: {@code epoch}, {@code samples_per_second}, the
     * training metrics by name ({@code loss}, ...) and the validation ones prefixed {@code val_}.
     */
    public List<Map<String, Double>> getHistory() {
        try {
            List<Map<String, Double>> epochs = new ArrayList<>();
            for (JsonNode report : JSON.readTree(historyJson)) {
                Map<String, Double> flat = new LinkedHashMap<>();
                flat.put("epoch", report.path("epoch").asDouble() + 1);
                flat.put("samples_per_second", report.path("samples_per_second").asDouble());
                addMetrics(flat, report.path("train"), "");
                addMetrics(flat, report.path("val"), "val_");
                epochs.add(Collections.unmodifiableMap(flat));
            }
            return Collections.unmodifiableList(epochs);
        } catch (IOException e) {
            throw new UncheckedIOException("unreadable history", e);
        }
    }

    private static void addMetrics(Map<String, Double> flat, JsonNode metrics, String prefix) {
        for (Map.Entry<String, JsonNode> metric : metrics.properties()) {
            flat.put(prefix + metric.getKey(), metric.getValue().asDouble());
        }
    }

    @Override
    public StructType transformSchema(StructType schema) {
        return Schemas.withOutputs(schema, ModelSpecInfo.of(getModelSpec()), this);
    }

    @Override
    public Dataset<Row> transform(Dataset<?> dataset) {
        if (weights.length == 0) {
            throw new IllegalStateException("HorovodModel " + uid + " has no weights (new HorovodModel() is empty): "
                    + "use the model HorovodEstimator.fit returns, or HorovodModel.load a saved one");
        }
        ModelSpecInfo info = ModelSpecInfo.of(getModelSpec());
        StructType output = Schemas.withOutputs(dataset.schema(), info, this);
        List<String> features = Schemas.featureColumns(this, info);
        SparkSession spark = dataset.sparkSession();
        Broadcast<byte[]> model = JavaSparkContext.fromSparkContext(spark.sparkContext()).broadcast(weights);
        JavaRDD<InternalRow> predicted = SparkShim.internalRows(dataset).toJavaRDD()
                .mapPartitions(new PredictPartition(dataset.schema(), features, getModelSpec(), model,
                        info.outputWidths(), BATCH_ROWS));
        return SparkShim.dataFrame(spark, predicted.rdd(), output);
    }

    @Override
    public HorovodModel copy(ParamMap extra) {
        HorovodModel copy = copyValues(new HorovodModel(uid, weights, historyJson), extra);
        return copy.setParent(parent());
    }

    @Override
    public MLWriter write() {
        return new Writer(this);
    }

    /** Spark's params metadata, then the weights and the history under {@code data/}. */
    private static final class Writer extends MLWriter {
        private final HorovodModel model;

        Writer(HorovodModel model) {
            this.model = model;
        }

        @Override
        public void saveImpl(String path) {
            SparkShim.saveMetadata(model, path, sparkSession());
            Configuration conf = sparkSession().sparkContext().hadoopConfiguration();
            HadoopFiles.write(conf, path + "/data/model.bin", model.weights);
            HadoopFiles.write(conf, path + "/data/history.json", model.historyJson.getBytes(StandardCharsets.UTF_8));
        }
    }

    private static final class Reader extends MLReader<HorovodModel> {
        @Override
        public HorovodModel load(String path) {
            DefaultParamsReader.Metadata metadata = SparkShim.loadMetadata(path, sparkSession(),
                    HorovodModel.class.getName());
            Configuration conf = sparkSession().sparkContext().hadoopConfiguration();
            byte[] weights = HadoopFiles.read(conf, path + "/data/model.bin");
            String history = new String(HadoopFiles.read(conf, path + "/data/history.json"), StandardCharsets.UTF_8);
            HorovodModel model = new HorovodModel(metadata.uid(), weights, history);
            metadata.getAndSetParams(model, scala.Option.empty());
            return model;
        }
    }
}
