package horovod.rs.examples;

import horovod.rs.spark.ml.HorovodEstimator;
import horovod.rs.spark.ml.HorovodModel;
import horovod.rs.spark.ml.ModelSpec;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * The estimator on a generated tabular data set, shaped like retail sales: categorical columns
 * (store, weekday, promotion) and continuous ones (distance to a competitor, temperature, price,
 * a trend). A model with one embedding per categorical column, batch norm over the continuous
 * ones and two dense layers learns log sales; the demo prints one line per epoch, the validation
 * metric and a few predictions next to the truth.
 *
 * <p>Run with {@code make demo}, or:
 * {@code spark-submit --master local-cluster[2,1,1024] --jars horovod-rs.jar
 * --conf spark.plugins=horovod.rs.spark.HorovodPlugin --class horovod.rs.examples.TabularDemo
 * horovod-rs-examples.jar [rows] [numProc]}
 */
public final class TabularDemo {
    private TabularDemo() {}

    public static void main(String[] args) {
        long rows = args.length > 0 ? Long.parseLong(args[0]) : 200_000;
        int numProc = args.length > 1 ? Integer.parseInt(args[1]) : 2;
        SparkSession spark = SparkSession.builder().appName("horovod-rs tabular demo").getOrCreate();
        try {
            Dataset<Row> sales = generate(spark, rows).cache();
            System.out.println("horovod-rs demo: " + sales.count() + " rows, 3 categorical + 4 continuous columns, "
                    + numProc + " ranks");
            Dataset<Row>[] split = sales.randomSplit(new double[] {0.9, 0.1}, 42);

            long start = System.nanoTime();
            HorovodModel model = new HorovodEstimator()
                    .setModelSpec(model())
                    .setLabelCols(new String[] {"log_sales"})
                    .setNumProc(numProc)
                    .setLoss("mae").setMetrics(new String[] {"mse", "exp_rmspe"})
                    .setOptimizer("adam").setLearningRate(0.003)
                    .setBatchSize(256).setEpochs(6).setValidation(0.1).setSeed(1)
                    .fit(split[0]);
            System.out.printf("horovod-rs demo: fit took %.1f s%n", (System.nanoTime() - start) / 1e9);

            List<Map<String, Double>> history = model.getHistory();
            Map<String, Double> last = history.get(history.size() - 1);
            System.out.printf("horovod-rs demo: validation mae %.4f, exp_rmspe %.4f (after %d epochs)%n",
                    last.get("val_loss"), last.get("val_exp_rmspe"), history.size());

            Dataset<Row> test = model.transform(split[1]);
            double rmspe = test.selectExpr("sqrt(avg(pow((exp(log_sales) - exp(prediction)) / exp(log_sales), 2)))")
                    .first().getDouble(0);
            System.out.printf("horovod-rs demo: held-out exp_rmspe %.4f on %d rows%n", rmspe, test.count());
            System.out.println("horovod-rs demo: predicted vs true sales:");
            for (Row row : test.selectExpr("store", "weekday", "promo", "round(exp(prediction), 1) AS predicted",
                    "round(exp(log_sales), 1) AS actual").orderBy(org.apache.spark.sql.functions.rand(3)).limit(5)
                    .collectAsList()) {
                System.out.printf("  store %3d  weekday %d  promo %d   predicted %8.1f   actual %8.1f%n",
                        row.getInt(0), row.getInt(1), row.getInt(2), row.getDouble(3), row.getDouble(4));
            }
        } finally {
            spark.stop();
        }
    }

    /** Sales driven by store, weekday, promotion, price and temperature, with multiplicative noise. */
    static Dataset<Row> generate(SparkSession spark, long rows) {
        return spark.range(0, rows, 1, 4)
                .selectExpr(
                        "CAST(id % 100 AS INT) AS store",
                        "CAST(floor(rand(1) * 7) AS INT) AS weekday",
                        "CAST(rand(2) < 0.4 AS INT) AS promo",
                        "rand(3) * 10 AS distance",
                        "randn(4) * 8 + 15 AS temperature",
                        "rand(5) * 4 + 1 AS price",
                        "rand(6) AS trend",
                        "randn(7) AS noise")
                .selectExpr("store", "weekday", "promo", "distance", "temperature", "price", "trend",
                        "8.0 + 0.6 * sin(store) + CASE WHEN weekday = 6 THEN -0.8 ELSE 0.1 * weekday END"
                                + " + 0.3 * promo - 0.05 * distance + 0.01 * temperature - 0.15 * price"
                                + " + 0.2 * trend + 0.03 * noise AS log_sales");
    }

    /** One embedding per categorical column, batch norm over the continuous ones, 64-32 relu. */
    static ModelSpec model() {
        return ModelSpec.builder()
                .categoricalInput("store", 100)
                .categoricalInput("weekday", 7)
                .categoricalInput("promo", 2)
                .floatInput("continuous", "distance", "temperature", "price", "trend")
                .embedding("store_emb", "store", 10)
                .embedding("weekday_emb", "weekday", 4)
                .embedding("promo_emb", "promo", 2)
                .batchNorm("continuous_bn", "continuous")
                .concatenate("all", "store_emb", "weekday_emb", "promo_emb", "continuous_bn")
                .dense("hidden1", "all", 64, "relu")
                .dense("hidden2", "hidden1", 32, "relu")
                .dense("log_sales_hat", "hidden2", 1, "linear")
                .output("log_sales_hat")
                .build();
    }
}
