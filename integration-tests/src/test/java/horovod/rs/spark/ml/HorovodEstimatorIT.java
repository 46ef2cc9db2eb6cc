package horovod.rs.spark.ml;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.apache.spark.sql.functions.col;

import horovod.rs.spark.HorovodJobFailedException;
import horovod.rs.spark.LocalCluster;
import java.io.File;
import java.nio.file.Files;
import java.util.List;
import java.util.Map;
import org.apache.spark.ml.Pipeline;
import org.apache.spark.ml.PipelineModel;
import org.apache.spark.ml.PipelineStage;
import java.util.Arrays;
import org.apache.spark.ml.evaluation.RegressionEvaluator;
import org.apache.spark.ml.feature.VectorAssembler;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.tuning.CrossValidator;
import org.apache.spark.ml.tuning.CrossValidatorModel;
import org.apache.spark.ml.tuning.ParamGridBuilder;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

/**
 * HorovodEstimator on a real cluster: two executor JVMs, two ranks, data in DataFrames.
 * One cluster for all the integration tests (LocalCluster); each test fits small models for a few seconds.
 */
public class HorovodEstimatorIT {
    private static SparkSession spark;
    /** y = 3 x1 - 2 x2 + effect[cat] + noise(0.05); 20% of rows flagged for validation. */
    private static Dataset<Row> regression;

    @Rule
    public TemporaryFolder dir = new TemporaryFolder();

    @BeforeClass
    public static void joinCluster() {
        spark = LocalCluster.session();
        regression = spark.range(0, 4000).repartition(3)
                .selectExpr("rand(1) * 2 - 1 AS x1", "randn(2) AS x2", "CAST(floor(rand(3) * 5) AS INT) AS cat",
                        "randn(4) AS noise", "rand(5) < 0.2 AS isVal")
                .selectExpr("x1", "x2", "cat", "isVal",
                        "3 * x1 - 2 * x2 + element_at(array(0.5, -1.0, 2.0, 0.0, 1.5), cat + 1) + 0.05 * noise AS y")
                .cache();
        regression.count();
    }

    @AfterClass
    public static void releaseData() {
        if (regression != null) {
            regression.unpersist();
        }
    }

    static ModelSpec regressionModel() {
        return ModelSpec.builder()
                .floatInput("num", "x1", "x2")
                .categoricalInput("cat", 5)
                .embedding("cat_emb", "cat", 3)
                .concatenate("all", "num", "cat_emb")
                .dense("hidden", "all", 32, "relu")
                .dense("y_hat", "hidden", 1, "linear")
                .output("y_hat")
                .build();
    }

    static HorovodEstimator regressionEstimator() {
        return new HorovodEstimator().setModelSpec(regressionModel()).setLabelCols(new String[] {"y"})
                .setNumProc(2).setLoss("mse").setMetrics(new String[] {"mae"}).setOptimizer("adam")
                .setLearningRate(0.01).setBatchSize(64).setEpochs(15).setValidation("isVal").setSeed(7);
    }

    @Test
    public void regressionReachesItsThresholdAndPredicts() {
        HorovodModel model = regressionEstimator().fit(regression);

        List<Map<String, Double>> history = model.getHistory();
        assertEquals(15, history.size());
        double valMse = history.get(history.size() - 1).get("val_loss");
        assertTrue("validation mse " + valMse + " should be below 0.05 (noise variance 0.0025)", valMse < 0.05);
        assertTrue("first epoch's loss " + history.get(0).get("loss") + " should be above the last's " + valMse,
                history.get(0).get("loss") > valMse);

        Dataset<Row> predicted = model.transform(regression.filter("isVal"));
        double mse = predicted.selectExpr("avg((prediction - y) * (prediction - y))").first().getDouble(0);
        assertTrue("transform's mse " + mse + " on validation rows should be below 0.05", mse < 0.05);
        assertEquals(regression.filter("isVal").count(), predicted.count());
    }

    @Test
    public void classificationReachesItsAccuracy() {
        Dataset<Row> blobs = spark.range(0, 3000).repartition(2)
                .selectExpr("CAST(id % 2 AS DOUBLE) AS label", "randn(11) AS a", "randn(12) AS b")
                .selectExpr("label", "a + 2.5 * (label * 2 - 1) AS f1", "b - 1.5 * (label * 2 - 1) AS f2");
        ModelSpec spec = ModelSpec.builder()
                .floatInput("f", "f1", "f2")
                .dense("hidden", "f", 8, "tanh")
                .dense("p", "hidden", 1, "sigmoid")
                .output("p")
                .build();
        HorovodModel model = new HorovodEstimator().setModelSpec(spec).setLabelCols(new String[] {"label"})
                .setNumProc(2).setLoss("binary_crossentropy").setMetrics(new String[] {"accuracy"})
                .setOptimizer("sgd").setLearningRate(0.1).setMomentum(0.9).setBatchSize(32).setEpochs(5)
                .setValidation(0.25).setSeed(3).fit(blobs);

        double valAccuracy = model.getHistory().get(4).get("val_accuracy");
        assertTrue("validation accuracy " + valAccuracy + " should reach 0.95", valAccuracy >= 0.95);
        double accuracy = model.transform(blobs)
                .selectExpr("avg(CAST((prediction > 0.5) = (label > 0.5) AS DOUBLE))")
                .first().getDouble(0);
        assertTrue("transform's accuracy " + accuracy + " should reach 0.95", accuracy >= 0.95);
    }

    @Test
    public void pipelineSaveLoadGivesIdenticalPredictions() throws Exception {
        VectorAssembler assembler = new VectorAssembler().setInputCols(new String[] {"x1", "x2"}).setOutputCol("xv");
        ModelSpec spec = ModelSpec.builder()
                .floatInput("xv", "xv")
                .dense("hidden", "xv", 16, "relu")
                .dense("y_hat", "hidden", 1, "linear")
                .output("y_hat")
                .build();
        HorovodEstimator estimator = new HorovodEstimator().setModelSpec(spec).setLabelCols(new String[] {"y"})
                .setNumProc(2).setEpochs(2).setBatchSize(128).setOutputCols(new String[] {"yHat"});
        Pipeline pipeline = new Pipeline().setStages(new PipelineStage[] {assembler, estimator});
        PipelineModel fitted = pipeline.fit(regression);

        String path = new File(dir.getRoot(), "pipeline").getAbsolutePath();
        fitted.write().overwrite().save(path);
        PipelineModel loaded = PipelineModel.load(path);

        double[] before = predictions(fitted.transform(regression));
        double[] after = predictions(loaded.transform(regression));
        assertArrayEquals(before, after, 0.0);
        assertTrue(((HorovodModel) loaded.stages()[1]).getHistory().size() == 2);

        // The unfitted pipeline round-trips too.
        String unfitted = new File(dir.getRoot(), "unfitted").getAbsolutePath();
        pipeline.write().overwrite().save(unfitted);
        HorovodEstimator reloaded = (HorovodEstimator) Pipeline.load(unfitted).getStages()[1];
        assertEquals(estimator.getModelSpec(), reloaded.getModelSpec());
        assertEquals(2, reloaded.getEpochs());
    }

    private static double[] predictions(Dataset<Row> df) {
        return df.orderBy("x1", "x2").select(col("yHat")).collectAsList().stream()
                .mapToDouble(r -> r.getDouble(0)).toArray();
    }

    @Test
    public void crossValidatorPicksALearningRate() {
        HorovodEstimator estimator = regressionEstimator().setEpochs(3).setValidation("").setVerbose(0);
        ParamMap[] grid = new ParamGridBuilder()
                .addGrid(estimator.learningRate(), new double[] {1e-6, 0.01})
                .build();
        CrossValidatorModel cv = new CrossValidator().setEstimator(estimator).setEstimatorParamMaps(grid)
                .setEvaluator(new RegressionEvaluator().setLabelCol("y").setPredictionCol("prediction")
                        .setMetricName("rmse"))
                .setNumFolds(2).setSeed(1).fit(regression);
        double[] rmse = cv.avgMetrics();
        assertTrue("a learning rate of 0.01 should beat 1e-6: " + Arrays.toString(rmse), rmse[1] < rmse[0]);
        HorovodModel best = (HorovodModel) cv.bestModel();
        assertEquals(0.01, ((HorovodEstimator) best.parent()).getLearningRate(), 0.0);
    }

    @Test
    public void missingColumnIsNamedBeforeAnyJob() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> regressionEstimator().setLabelCols(new String[] {"target"}).fit(regression));
        assertTrue(e.getMessage(), e.getMessage().contains("label column 'target' is not in the DataFrame"));
        assertTrue(e.getMessage(), e.getMessage().contains("x1"));
    }

    @Test
    public void nullLabelsAreNamedOrDroppedOnRequest() {
        Dataset<Row> withNulls = regression.selectExpr("x1", "x2", "cat", "isVal",
                "CASE WHEN x1 > 0.9 THEN NULL ELSE y END AS y");
        long nulls = withNulls.filter("y IS NULL").count();
        HorovodJobFailedException e = assertThrows(HorovodJobFailedException.class,
                () -> regressionEstimator().setEpochs(1).fit(withNulls));
        assertTrue(e.getMessage(), e.getMessage().contains("'y'"));
        assertTrue(e.getMessage(), e.getMessage().contains("null"));

        HorovodModel model = regressionEstimator().setEpochs(1).setDropInvalidRows(true).fit(withNulls);
        assertEquals(1, model.getHistory().size());
        assertTrue(nulls > 0);
    }

    @Test
    public void secondFitWithTheSameRunIdResumes() throws Exception {
        String store = dir.newFolder("store").getAbsolutePath();
        HorovodModel first = regressionEstimator().setEpochs(2).setStore(store).setRunId("resume").fit(regression);
        assertTrue(new File(store, "runs/resume/checkpoint.bin").isFile());
        assertTrue(new File(store, "runs/resume/model.bin").isFile());

        HorovodModel resumed = regressionEstimator().setEpochs(4).setStore(store).setRunId("resume").fit(regression);
        List<Map<String, Double>> history = resumed.getHistory();
        assertEquals("the resumed run trains epochs 3 and 4 only", 4, history.size());
        assertEquals(first.getHistory().get(1).get("loss"), history.get(1).get("loss"));
        String written = Files.readString(new File(store, "runs/resume/history.json").toPath());
        assertTrue(written, written.length() > 2);
    }

    /**
     * An executor JVM killed with SIGKILL after the first epoch's checkpoint: the fit runs its ranks
     * again (spark.horovod.rs.fitAttempts), resumes from the checkpoint and ends with every epoch.
     * In local-cluster the executors are child processes of this JVM; the worker starts a new one,
     * but the second attempt does not wait for it: spark.horovod.rs.fitMinProcesses=1 (LocalCluster)
     * lets it run on the one slot left, and it stops after the epoch in which the driver sees the
     * new executor, so that a third attempt runs the rest on both slots. The fit is long enough
     * for local-cluster's restart to land well within the second attempt: on the regression rows
     * four times over with Horovod's default steps (the rows over the ranks' batches), the one rank
     * left would train for about 60 s (0.4 s an epoch), and the executor is back after 8-10 s on a
     * loaded 2-core host; both ranks take half as many steps an epoch, so the third attempt's
     * epochs take half as long.
     */
    private static final int EPOCHS_KILLED = 150;
    private static final int KILLED_ROWS_TIMES = 4;

    @Test
    public void fitSurvivesAnExecutorKilledMidTrainingAndResumes() throws Exception {
        String store = dir.newFolder("store").getAbsolutePath();
        File history = new File(store, "runs/killed/history.json");
        java.util.concurrent.atomic.AtomicLong killed = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong killedAt = new java.util.concurrent.atomic.AtomicLong();
        long started = System.nanoTime();
        Thread killer = new Thread(() -> {
            while (!history.isFile() && !Thread.currentThread().isInterrupted()) {
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                }
            }
            ProcessHandle.current().descendants()
                    .filter(p -> p.info().commandLine().orElse("").contains("CoarseGrainedExecutorBackend"))
                    .findFirst().ifPresent(p -> {
                        killedAt.set(System.nanoTime());
                        killed.set(p.pid());
                        p.destroyForcibly();
                    });
        }, "executor killer");
        killer.start();
        // The tasks of each stage's last submission, by job description: the retry's barrier stage is its last.
        Map<String, Integer> lastStageTasks = new java.util.concurrent.ConcurrentHashMap<>();
        java.util.concurrent.atomic.AtomicLong executorBack = new java.util.concurrent.atomic.AtomicLong();
        org.apache.spark.scheduler.SparkListener stages = new org.apache.spark.scheduler.SparkListener() {
            @Override
            public void onExecutorAdded(org.apache.spark.scheduler.SparkListenerExecutorAdded added) {
                if (killed.get() > 0) {
                    executorBack.compareAndSet(0, System.nanoTime());
                }
            }

            @Override
            public void onStageSubmitted(org.apache.spark.scheduler.SparkListenerStageSubmitted submitted) {
                String description = submitted.properties() == null ? null
                        : submitted.properties().getProperty("spark.job.description");
                if (description != null) {
                    lastStageTasks.put(description, submitted.stageInfo().numTasks());
                }
            }
        };
        spark.sparkContext().addSparkListener(stages);
        Dataset<Row> killedRows = regression.crossJoin(spark.range(KILLED_ROWS_TIMES)).drop("id");
        HorovodModel model;
        try {
            model = regressionEstimator().setEpochs(EPOCHS_KILLED).setBatchSize(32).setStore(store)
                    .setRunId("killed").fit(killedRows);
        } finally {
            killer.interrupt();
            killer.join();
            spark.sparkContext().removeSparkListener(stages);
        }
        assertTrue("no executor was killed: the fit ended before its first checkpoint was seen", killed.get() > 0);
        System.out.printf("the fit took %.1f s; its executor was back %.1f s after the kill%n",
                (System.nanoTime() - started) / 1e9, (executorBack.get() - killedAt.get()) / 1e9);
        String retry = lastStageTasks.keySet().stream().filter(d -> d.endsWith(" attempt 2")).findFirst()
                .orElseThrow(() -> new AssertionError("no second attempt among " + lastStageTasks.keySet()));
        assertEquals("the second attempt ran on the one slot left", 1, (int) lastStageTasks.get(retry));
        String grown = lastStageTasks.keySet().stream().filter(d -> d.endsWith(" attempt 3")).findFirst()
                .orElseThrow(() -> new AssertionError("no third attempt among " + lastStageTasks.keySet()
                        + (executorBack.get() == 0 ? " (the executor did not come back during the fit)" : "")));
        assertEquals("the third attempt grew back to both slots", 2, (int) lastStageTasks.get(grown));
        assertEquals(EPOCHS_KILLED, model.getHistory().size());
        assertEquals(regression.count(), model.transform(regression).filter("NOT isnan(prediction)").count());
    }
}
