// The Scala user's path: spark-shell with horovod-rs.jar, a model spec, fit, transform.
//
//   spark-shell --master 'local-cluster[2,1,1024]' --jars horovod-rs.jar \
//     --conf spark.plugins=horovod.rs.spark.HorovodPlugin < examples/scala/fit.scala
//
// (or `:load examples/scala/fit.scala` in an interactive shell). The body is one block so that
// the shell reads it whole; the shell exits non-zero when the model misses its threshold.
import horovod.rs.spark.ml.{HorovodEstimator, ModelSpec}

val exitCode = try {
  val df = spark.range(0, 5000).selectExpr("rand(1) * 2 - 1 AS x1", "randn(2) AS x2",
      "CAST(floor(rand(3) * 4) AS INT) AS color")
    .selectExpr("x1", "x2", "color",
      "2 * x1 - x2 + element_at(array(0.0, 1.0, -1.0, 0.5), color + 1) AS y")

  val spec = ModelSpec.builder().
    floatInput("num", "x1", "x2").
    categoricalInput("color", 4).
    embedding("color_emb", "color", 2).
    concatenate("all", "num", "color_emb").
    dense("hidden", "all", 16, "relu").
    dense("y_hat", "hidden", 1, "linear").
    output("y_hat").
    build()

  val model = new HorovodEstimator().
    setModelSpec(spec).setLabelCols(Array("y")).setNumProc(2).
    setLoss("mse").setOptimizer("adam").setLearningRate(0.01).
    setBatchSize(64).setEpochs(10).setValidation(0.2).setSeed(5).
    fit(df)

  val predicted = model.transform(df)
  val mse = predicted.selectExpr("avg(pow(prediction - y, 2))").first().getDouble(0)
  predicted.select("x1", "x2", "color", "y", "prediction").show(5)
  println(f"scala example: training mse $mse%.4f after ${model.getHistory.size} epochs")
  if (mse < 0.05) 0 else 1
} catch {
  case e: Throwable => e.printStackTrace(); 2
}
System.exit(exitCode)
