package horovod.rs.spark.ml;

import org.apache.spark.ml.Estimator;
import org.apache.spark.ml.param.BooleanParam;
import org.apache.spark.ml.param.DoubleParam;
import org.apache.spark.ml.param.IntParam;
import org.apache.spark.ml.param.LongParam;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.param.StringArrayParam;
import org.apache.spark.ml.util.DefaultParamsReader;
import org.apache.spark.ml.util.DefaultParamsWritable;
import org.apache.spark.ml.util.Identifiable$;
import org.apache.spark.ml.util.MLReader;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.types.StructType;

/**
 * Fits a deep model on a DataFrame across Spark executors, data parallel, with the native
 * trainer: {@code fit(df)} gives a {@link HorovodModel} whose {@code transform(df)} predicts.
 *
 * <pre>{@code
 * HorovodModel model = new HorovodEstimator()
 *     .setModelSpec(spec).setFeatureCols(new String[] {"x"}).setLabelCols(new String[] {"y"})
 *     .setNumProc(2).setLoss("mse").setOptimizer("adam").setLearningRate(1e-3)
 *     .setBatchSize(64).setEpochs(10).setValidation(0.1).setStore("dbfs:/runs")
 *     .fit(train);
 * }</pre>
 *
 * <p>{@code fit} selects the feature, label and validation columns, repartitions them to
 * {@code numProc} partitions and runs one barrier stage: every task moves its partition into the
 * native trainer in batches (no files in between), rank 0's initial weights go to every rank,
 * gradients are averaged every step, and every rank ends with the same weights. The params follow
 * Horovod's KerasEstimator where one exists; the params the fitted model shares (features, outputs, model spec) are in {@link ModelParams}.
 *
 * <p>Spark ML on Spark Connect (Spark 4.0+) serves it to Connect clients: the jar registers it
 * for {@link java.util.ServiceLoader} (META-INF/services), and the server builds it by name with
 * the client's uid ({@link #HorovodEstimator(String)}) for each fit and write.
 */
public final class HorovodEstimator extends Estimator<HorovodModel>
        implements ModelParams, DefaultParamsWritable {
    private static final long serialVersionUID = 1L;

    private final String uid;
    private final StringArrayParam featureCols;
    private final StringArrayParam labelCols;
    private final StringArrayParam outputCols;
    private final Param<String> modelSpec;
    private final IntParam numProc;
    private final Param<String> validation;
    private final Param<String> store;
    private final Param<String> runId;
    private final BooleanParam dropInvalidRows;
    private final BooleanParam useGpu;
    private final IntParam verbose;
    private final IntParam batchSize;
    private final IntParam valBatchSize;
    private final IntParam epochs;
    private final IntParam trainStepsPerEpoch;
    private final Param<String> optimizer;
    private final DoubleParam learningRate;
    private final DoubleParam momentum;
    private final DoubleParam weightDecay;
    private final DoubleParam epsilon;
    private final Param<String> loss;
    private final StringArrayParam metrics;
    private final Param<String> monitor;
    private final IntParam earlyStoppingPatience;
    private final IntParam shuffleBufferSize;
    private final LongParam seed;

    public HorovodEstimator() {
        this(Identifiable$.MODULE$.randomUID("HorovodEstimator"));
    }

    public HorovodEstimator(String uid) {
        this.uid = uid;
        featureCols = new StringArrayParam(this, "featureCols",
                "feature columns; empty: the columns the model spec's inputs name");
        labelCols = new StringArrayParam(this, "labelCols", "label columns, one per model output, in order");
        outputCols = new StringArrayParam(this, "outputCols",
                "columns the fitted model's transform adds, one per model output; empty: 'prediction' for a "
                        + "single output, else the outputs' names");
        modelSpec = new Param<>(this, "modelSpec", "the model, as model-spec JSON (see ModelSpec)");
        numProc = new IntParam(this, "numProc", "ranks (barrier tasks); 0: Spark's default parallelism");
        validation = new Param<>(this, "validation",
                "validation rows: empty for none, a column name (rows where it is true), or a fraction such as 0.1");
        store = new Param<>(this, "store",
                "Hadoop FileSystem URI for checkpoints, the model and the history (file:, hdfs:, s3a:, dbfs:, "
                        + "or /dbfs/...); empty: nothing is written and no run can resume");
        runId = new Param<>(this, "runId", "the run's directory in the store; a fit with an existing run id resumes it");
        dropInvalidRows = new BooleanParam(this, "dropInvalidRows",
                "drop rows with nulls, NaN labels or ragged arrays (and say how many) instead of failing");
        useGpu = new BooleanParam(this, "useGpu", "reserve a GPU for every rank (a task resource request); the "
                + "native trainer still trains on the CPU: for GPU training use the Python estimators");
        verbose = new IntParam(this, "verbose", "0: quiet, 1: one line per epoch on the driver");
        batchSize = new IntParam(this, "batchSize", "training rows per step on each rank");
        valBatchSize = new IntParam(this, "valBatchSize", "validation rows per step; 0: batchSize");
        epochs = new IntParam(this, "epochs", "passes over the training data");
        trainStepsPerEpoch = new IntParam(this, "trainStepsPerEpoch",
                "steps per epoch on every rank; 0: the training rows over numProc x batchSize");
        optimizer = new Param<>(this, "optimizer", "sgd, adam or adamw");
        learningRate = new DoubleParam(this, "learningRate", "the optimizer's learning rate");
        momentum = new DoubleParam(this, "momentum", "sgd's momentum");
        weightDecay = new DoubleParam(this, "weightDecay", "adamw's decoupled weight decay");
        epsilon = new DoubleParam(this, "epsilon", "adam's and adamw's epsilon");
        loss = new Param<>(this, "loss", "mse, mae, binary_crossentropy, categorical_crossentropy or "
                + "sparse_categorical_crossentropy");
        metrics = new StringArrayParam(this, "metrics", "metrics reported per epoch: losses by name, accuracy, exp_rmspe");
        monitor = new Param<>(this, "monitor",
                "metric that picks the best epoch's model, e.g. val_loss; empty: val_loss with validation, else loss");
        earlyStoppingPatience = new IntParam(this, "earlyStoppingPatience",
                "stop after this many epochs without improvement of the monitored metric; 0: never");
        shuffleBufferSize = new IntParam(this, "shuffleBufferSize", "rows in each rank's shuffle buffer");
        seed = new LongParam(this, "seed", "seed of weight init, dropout, shuffling and validation split");

        setDefault(featureCols, new String[0]);
        setDefault(outputCols, new String[0]);
        setDefault(numProc, 0);
        setDefault(validation, "");
        setDefault(store, "");
        setDefault(runId, "");
        setDefault(dropInvalidRows, false);
        setDefault(useGpu, false);
        setDefault(verbose, 1);
        setDefault(batchSize, 32);
        setDefault(valBatchSize, 0);
        setDefault(epochs, 1);
        setDefault(trainStepsPerEpoch, 0);
        setDefault(optimizer, "adam");
        setDefault(learningRate, 0.001);
        setDefault(momentum, 0.0);
        setDefault(weightDecay, 0.0);
        setDefault(epsilon, 1e-7);
        setDefault(loss, "mse");
        setDefault(metrics, new String[0]);
        setDefault(monitor, "");
        setDefault(earlyStoppingPatience, 0);
        setDefault(shuffleBufferSize, 10_000);
        setDefault(seed, 0L);
    }

    public static MLReader<HorovodEstimator> read() {
        return new DefaultParamsReader<>();
    }

    public static HorovodEstimator load(String path) {
        return read().load(path);
    }

    @Override
    public String uid() {
        return uid;
    }

    @Override
    public HorovodModel fit(Dataset<?> dataset) {
        return new FitJob(this, dataset).run();
    }

    @Override
    public StructType transformSchema(StructType schema) {
        return Schemas.withOutputs(schema, ModelSpecInfo.of(getModelSpec()), this);
    }

    @Override
    public HorovodEstimator copy(ParamMap extra) {
        return defaultCopy(extra);
    }

    // Params, for Spark's reflection-based discovery (public, no arguments, returning a Param).

    @Override public StringArrayParam featureCols() { return featureCols; }
    public StringArrayParam labelCols() { return labelCols; }
    @Override public StringArrayParam outputCols() { return outputCols; }
    @Override public Param<String> modelSpec() { return modelSpec; }
    public IntParam numProc() { return numProc; }
    public Param<String> validation() { return validation; }
    public Param<String> store() { return store; }
    public Param<String> runId() { return runId; }
    public BooleanParam dropInvalidRows() { return dropInvalidRows; }
    public BooleanParam useGpu() { return useGpu; }
    public IntParam verbose() { return verbose; }
    public IntParam batchSize() { return batchSize; }
    public IntParam valBatchSize() { return valBatchSize; }
    public IntParam epochs() { return epochs; }
    public IntParam trainStepsPerEpoch() { return trainStepsPerEpoch; }
    public Param<String> optimizer() { return optimizer; }
    public DoubleParam learningRate() { return learningRate; }
    public DoubleParam momentum() { return momentum; }
    public DoubleParam weightDecay() { return weightDecay; }
    public DoubleParam epsilon() { return epsilon; }
    public Param<String> loss() { return loss; }
    public StringArrayParam metrics() { return metrics; }
    public Param<String> monitor() { return monitor; }
    public IntParam earlyStoppingPatience() { return earlyStoppingPatience; }
    public IntParam shuffleBufferSize() { return shuffleBufferSize; }
    public LongParam seed() { return seed; }

    // Setters and getters.

    public HorovodEstimator setFeatureCols(String[] value) { set(featureCols, value); return this; }
    public HorovodEstimator setLabelCols(String[] value) { set(labelCols, value); return this; }
    public HorovodEstimator setOutputCols(String[] value) { set(outputCols, value); return this; }
    public HorovodEstimator setModelSpec(String value) { set(modelSpec, value); return this; }
    public HorovodEstimator setModelSpec(ModelSpec value) { return setModelSpec(value.toJson()); }
    public HorovodEstimator setNumProc(int value) { set(numProc, value); return this; }
    public HorovodEstimator setValidation(String column) { set(validation, column); return this; }
    public HorovodEstimator setValidation(double fraction) {
        if (!(fraction > 0 && fraction < 1)) {
            throw new IllegalArgumentException("validation fraction must be in (0, 1), got " + fraction);
        }
        set(validation, Double.toString(fraction));
        return this;
    }
    public HorovodEstimator setStore(String value) { set(store, value); return this; }
    public HorovodEstimator setRunId(String value) { set(runId, value); return this; }
    public HorovodEstimator setDropInvalidRows(boolean value) { set(dropInvalidRows, value); return this; }
    public HorovodEstimator setUseGpu(boolean value) { set(useGpu, value); return this; }
    public HorovodEstimator setVerbose(int value) { set(verbose, value); return this; }
    public HorovodEstimator setBatchSize(int value) { set(batchSize, value); return this; }
    public HorovodEstimator setValBatchSize(int value) { set(valBatchSize, value); return this; }
    public HorovodEstimator setEpochs(int value) { set(epochs, value); return this; }
    public HorovodEstimator setTrainStepsPerEpoch(int value) { set(trainStepsPerEpoch, value); return this; }
    public HorovodEstimator setOptimizer(String value) { set(optimizer, value); return this; }
    public HorovodEstimator setLearningRate(double value) { set(learningRate, value); return this; }
    public HorovodEstimator setMomentum(double value) { set(momentum, value); return this; }
    public HorovodEstimator setWeightDecay(double value) { set(weightDecay, value); return this; }
    public HorovodEstimator setEpsilon(double value) { set(epsilon, value); return this; }
    public HorovodEstimator setLoss(String value) { set(loss, value); return this; }
    public HorovodEstimator setMetrics(String[] value) { set(metrics, value); return this; }
    public HorovodEstimator setMonitor(String value) { set(monitor, value); return this; }
    public HorovodEstimator setEarlyStoppingPatience(int value) { set(earlyStoppingPatience, value); return this; }
    public HorovodEstimator setShuffleBufferSize(int value) { set(shuffleBufferSize, value); return this; }
    public HorovodEstimator setSeed(long value) { set(seed, value); return this; }

    public String[] getLabelCols() { return getOrDefault(labelCols); }
    public int getNumProc() { return (Integer) getOrDefault(numProc); }
    public String getValidation() { return getOrDefault(validation); }
    public String getStore() { return getOrDefault(store); }
    public String getRunId() { return getOrDefault(runId); }
    public boolean getDropInvalidRows() { return (Boolean) getOrDefault(dropInvalidRows); }
    public boolean getUseGpu() { return (Boolean) getOrDefault(useGpu); }
    public int getVerbose() { return (Integer) getOrDefault(verbose); }
    public int getBatchSize() { return (Integer) getOrDefault(batchSize); }
    public int getValBatchSize() { return (Integer) getOrDefault(valBatchSize); }
    public int getEpochs() { return (Integer) getOrDefault(epochs); }
    public int getTrainStepsPerEpoch() { return (Integer) getOrDefault(trainStepsPerEpoch); }
    public String getOptimizer() { return getOrDefault(optimizer); }
    public double getLearningRate() { return (Double) getOrDefault(learningRate); }
    public double getMomentum() { return (Double) getOrDefault(momentum); }
    public double getWeightDecay() { return (Double) getOrDefault(weightDecay); }
    public double getEpsilon() { return (Double) getOrDefault(epsilon); }
    public String getLoss() { return getOrDefault(loss); }
    public String[] getMetrics() { return getOrDefault(metrics); }
    public String getMonitor() { return getOrDefault(monitor); }
    public int getEarlyStoppingPatience() { return (Integer) getOrDefault(earlyStoppingPatience); }
    public int getShuffleBufferSize() { return (Integer) getOrDefault(shuffleBufferSize); }
    public long getSeed() { return (Long) getOrDefault(seed); }
}
