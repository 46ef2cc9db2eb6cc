package horovod.rs.spark.ml;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import horovod.rs.spark.HorovodConf;
import horovod.rs.spark.HorovodException;
import horovod.rs.spark.HorovodRunOptions;
import horovod.rs.spark.HorovodRunner;
import horovod.rs.spark.Lists;
import horovod.rs.spark.shim.SparkShim;
import horovod.rs.spark.store.Store;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.UUID;
import org.apache.spark.SparkContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BooleanType$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.NumericType;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One {@code HorovodEstimator.fit}, on the driver: check the columns and params before any job
 * runs, prepare the data (select, repartition), run the ranks, and make the model of their results.
 */
final class FitJob {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Logger LOG = LoggerFactory.getLogger(FitJob.class);
    /** What useGpu does today, said on every fit that sets it. */
    static final String TRAINS_ON_CPU = "useGpu: every rank reserves a GPU, but the native trainer trains on the "
            + "CPU (it has no GPU support yet). To train on GPUs use the Python estimators (horovod_rs.spark.keras, "
            + "horovod_rs.spark.torch); to leave the GPUs to other jobs, set useGpu to false.";

    private final HorovodEstimator estimator;
    private final Dataset<?> dataset;

    FitJob(HorovodEstimator estimator, Dataset<?> dataset) {
        this.estimator = estimator;
        this.dataset = dataset;
    }

    HorovodModel run() {
        String spec = estimator.getModelSpec();
        ModelSpecInfo info = ModelSpecInfo.of(spec);
        StructType schema = dataset.schema();
        List<String> features = Schemas.featureColumns(estimator, info);
        List<String> labels = labelColumns(info, schema);
        features.forEach(f -> Schemas.requireColumn(schema, f, "feature"));
        Validation validation = Validation.parse(estimator.getValidation(), schema);

        Set<String> columns = new LinkedHashSet<>(features);
        columns.addAll(labels);
        if (validation.column() != null) {
            columns.add(validation.column());
        }
        SparkContext sc = dataset.sparkSession().sparkContext();
        int numProc = estimator.getNumProc() > 0 ? estimator.getNumProc() : sc.defaultParallelism();
        Store store = estimator.getStore().isEmpty() ? null : Store.create(estimator.getStore(), sc.hadoopConfiguration());
        String runId = estimator.getRunId().isEmpty() ? newRunId() : estimator.getRunId();
        Progress progress = new Progress(estimator.getVerbose() > 0, store, runId);
        if (store != null && store.exists(store.runFile(runId, Store.CHECKPOINT))) {
            progress.say("resuming run " + runId + " from its checkpoint in " + store.runPath(runId));
        }

        Dataset<Row> selected = dataset.select(columns.stream().map(Column::new).toArray(Column[]::new));
        StructType selectedSchema = selected.schema();
        HorovodRunOptions options = HorovodRunOptions.fromConf(sc.getConf());
        if (estimator.getUseGpu()) {
            LOG.warn(TRAINS_ON_CPU);
            options = options.withGpusPerRank(1);
        }
        String config = trainConfig(labels, validation, options);
        FitRank rank = new FitRank(selectedSchema, new ArrayList<>(columns), labels, estimator.getDropInvalidRows(),
                spec, config, store, runId);
        String description = "horovod-rs: fit HorovodEstimator " + estimator.uid() + " (run " + runId + ", "
                + numProc + " ranks, " + estimator.getEpochs() + " epochs)";

        List<FitResult> results = runAttempts(selected, numProc, rank, options, description, store, runId, progress,
                HorovodConf.FIT_ATTEMPTS.get(sc.getConf()), HorovodConf.FIT_MIN_PROCESSES.get(sc.getConf()));
        FitResult first = checkIdentical(results);
        long dropped = results.stream().mapToLong(FitResult::droppedRows).sum();
        if (dropped > 0) {
            progress.say("dropped " + dropped + " invalid rows (nulls, NaN labels or ragged arrays)");
        }
        progress.finish(first.historyJson());
        HorovodModel model = new HorovodModel(estimator.uid() + "_model", first.model(), first.historyJson());
        model.setParent(estimator);
        model.setFeatureCols(features.toArray(new String[0]));
        model.setOutputCols(Schemas.outputColumns(estimator, info).toArray(new String[0]));
        model.setModelSpec(spec);
        return model;
    }

    /**
     * Runs the ranks; when Spark loses one outside the trainer (an executor dies), runs them again,
     * {@code attempts} times in all. Each attempt's rank 0 resumes from the store's last
     * checkpoint, so at most the epoch in flight runs twice; without a store it starts over. An
     * attempt after the first runs on fewer ranks when {@code minProcesses} allows it and the
     * cluster has fewer slots then (the rows are repartitioned to the ranks it has); with a store,
     * such an attempt stops after the epoch in which the slots come back ({@link RegrowWatch}),
     * and the next one resumes on all {@code numProc} (not counted as a lost attempt).
     */
    private static List<FitResult> runAttempts(Dataset<Row> selected, int numProc, FitRank rank,
            HorovodRunOptions options, String description, Store store, String runId, Progress progress, int attempts,
            Integer minProcesses) {
        SparkContext sc = selected.sparkSession().sparkContext();
        int[] ranks = {numProc};
        return HorovodRunner.withAttempts(attempts, HorovodConf.FIT_ATTEMPTS.key(), attempt -> {
            RDD<InternalRow> rows = SparkShim.internalRows(onePartitionPerRank(selected, ranks[0]));
            String label = attempt > 1 || attempts > 1 ? description + " attempt " + attempt : description;
            boolean mayGrow = store != null && ranks[0] < numProc;
            String marker = mayGrow ? store.runFile(runId, "regrow-" + attempt) : null;
            progress.start();
            RegrowWatch watch = mayGrow ? RegrowWatch.start(sc, numProc, store, marker) : null;
            try {
                return HorovodRunner.runOnPartitions(rows, mayGrow ? rank.regrowingOn(marker) : rank, options, label);
            } finally {
                progress.stop();
                if (watch != null) {
                    watch.close();
                    deleteMarker(store, marker);
                }
            }
        }, (attempt, lost) -> {
            ranks[0] = ranksForRetry(sc, numProc, minProcesses);
            String retry = "attempt " + attempt + " lost a rank outside the trainer; attempt " + (attempt + 1) + " "
                    + resumePoint(store, runId) + " on " + ranks[0] + " ranks: " + lost.getMessage();
            LOG.warn(retry);
            progress.say(retry);
        }, (attempt, results) -> {
            if (!results.get(0).regrow()) {
                return false;
            }
            int had = ranks[0];
            ranks[0] = ranksForRetry(sc, numProc, minProcesses);
            String grown = "the cluster has slots for " + numProc + " ranks again: attempt " + attempt + " (on " + had
                    + " ranks) stopped after its epoch; attempt " + (attempt + 1) + " resumes from the checkpoint in "
                    + store.runPath(runId) + " on " + ranks[0] + " ranks";
            LOG.info(grown);
            progress.say(grown);
            return true;
        });
    }

    /**
     * How many ranks a fit's next attempt runs with: {@code numProc}, or, when {@code minimum}
     * ({@code spark.horovod.rs.fitMinProcesses}) is set, the task slots the cluster has now if
     * fewer, but not fewer than {@code minimum} (the attempt then waits for those).
     */
    static int ranksForRetry(SparkContext sc, int numProc, Integer minimum) {
        if (minimum == null) {
            return numProc;
        }
        return Math.max(Math.min(minimum, numProc), Math.min(numProc, taskSlots(sc)));
    }

    /** Deletes an attempt's regrow marker; a store that refuses only leaves the empty file behind. */
    private static void deleteMarker(Store store, String marker) {
        try {
            store.delete(marker);
        } catch (RuntimeException e) {
            LOG.warn("could not delete {}: {}", marker, e.getMessage());
        }
    }

    /** How many tasks the cluster runs at once now, as its scheduler counts them. */
    static int taskSlots(SparkContext sc) {
        return sc.maxNumConcurrentTasks(sc.resourceProfileManager().defaultResourceProfile());
    }

    private static String resumePoint(Store store, String runId) {
        if (store == null) {
            return "starts over (the fit has no store to keep checkpoints in)";
        }
        return store.exists(store.runFile(runId, Store.CHECKPOINT))
                ? "resumes from the checkpoint in " + store.runPath(runId) + " (the epoch in flight runs again)"
                : "starts over (no epoch had finished)";
    }

    /**
     * One partition per rank: a DataFrame that already has as many partitions as ranks is used as
     * it is (no shuffle); any other is repartitioned. Merging partitions instead (coalesce) would
     * save the shuffle, but Spark's barrier stages refuse RDD chains that change the number of
     * partitions without one.
     */
    static Dataset<Row> onePartitionPerRank(Dataset<Row> data, int numProc) {
        return data.rdd().getNumPartitions() == numProc ? data : data.repartition(numProc);
    }

    private List<String> labelColumns(ModelSpecInfo info, StructType schema) {
        if (!estimator.isDefined(estimator.labelCols()) || estimator.getLabelCols().length == 0) {
            throw new IllegalArgumentException("no label columns: call setLabelCols with one column per model output "
                    + info.outputNames());
        }
        List<String> labels = Lists.of(estimator.getLabelCols());
        if (labels.size() != info.outputNames().size()) {
            throw new IllegalArgumentException("labelCols " + labels + " must name one column per model output "
                    + info.outputNames());
        }
        labels.forEach(l -> Schemas.requireColumn(schema, l, "label"));
        return labels;
    }

    /** Every rank must end with the same weights; anything else is a bug worth failing for. */
    static FitResult checkIdentical(List<FitResult> results) {
        FitResult first = results.get(0);
        for (FitResult result : results) {
            if (!result.weightsDigest().equals(first.weightsDigest())) {
                throw new HorovodException("rank " + result.rank() + " ended with weights different from rank 0's ("
                        + result.weightsDigest() + " vs " + first.weightsDigest() + ")");
            }
        }
        return first;
    }

    private String trainConfig(List<String> labels, Validation validation, HorovodRunOptions options) {
        ObjectNode config = JSON.createObjectNode();
        config.putPOJO("label_columns", labels);
        config.put("batch_size", estimator.getBatchSize());
        if (estimator.getValBatchSize() > 0) {
            config.put("val_batch_size", estimator.getValBatchSize());
        }
        config.put("epochs", estimator.getEpochs());
        if (estimator.getTrainStepsPerEpoch() > 0) {
            config.put("steps_per_epoch", estimator.getTrainStepsPerEpoch());
        }
        ObjectNode optimizer = config.putObject("optimizer");
        optimizer.put("name", estimator.getOptimizer().toLowerCase(Locale.ROOT));
        optimizer.put("learning_rate", estimator.getLearningRate());
        optimizer.put("momentum", estimator.getMomentum());
        optimizer.put("weight_decay", estimator.getWeightDecay());
        optimizer.put("epsilon", estimator.getEpsilon());
        config.put("loss", estimator.getLoss());
        config.putPOJO("metrics", Lists.of(estimator.getMetrics()));
        validation.writeTo(config);
        if (!estimator.getMonitor().isEmpty()) {
            config.put("monitor", estimator.getMonitor());
        }
        if (estimator.getEarlyStoppingPatience() > 0) {
            config.put("early_stopping_patience", estimator.getEarlyStoppingPatience());
        }
        config.put("shuffle_buffer_size", estimator.getShuffleBufferSize());
        config.put("seed", estimator.getSeed());
        config.put("collective_timeout_ms", options.collectiveTimeout().toMillis());
        return config.toString();
    }

    private static String newRunId() {
        return "run-" + LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss")) + "-"
                + UUID.randomUUID().toString().substring(0, 8);
    }

    /** The validation param: none, a column of the DataFrame, or a fraction of each rank's rows. */
    static final class Validation {
        private final String column;
        private final double fraction;

        private Validation(String column, double fraction) {
            this.column = column;
            this.fraction = fraction;
        }

        String column() {
            return column;
        }

        double fraction() {
            return fraction;
        }

        static Validation parse(String value, StructType schema) {
            if (value == null || value.isEmpty()) {
                return new Validation(null, 0);
            }
            List<String> names = Lists.of(schema.fieldNames());
            if (names.contains(value)) {
                DataType type = schema.apply(value).dataType();
                if (!(type instanceof NumericType) && !type.equals(BooleanType$.MODULE$)) {
                    throw new IllegalArgumentException("validation column '" + value + "' is " + type.simpleString()
                            + "; it must be boolean or numeric (nonzero marks a validation row)");
                }
                return new Validation(value, 0);
            }
            try {
                double fraction = Double.parseDouble(value);
                if (fraction > 0 && fraction < 1) {
                    return new Validation(null, fraction);
                }
            } catch (NumberFormatException notANumber) {
                // Reported below with the columns there are.
            }
            throw new IllegalArgumentException("validation '" + value + "' is neither a column of the DataFrame "
                    + names + " nor a fraction in (0, 1)");
        }

        void writeTo(ObjectNode config) {
            if (column != null) {
                config.put("validation_column", column);
            } else if (fraction > 0) {
                config.put("validation_fraction", fraction);
            }
        }
    }
}
