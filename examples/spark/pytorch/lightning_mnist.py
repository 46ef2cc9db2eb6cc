"""MNIST-like digits with horovod_rs.spark.lightning: a LightningModule trained by the Lightning
TorchEstimator on a Spark DataFrame read from a LIBSVM file, then transform on the held-out
rows. Exits 1 when the test accuracy is below --min-accuracy.

    python lightning_mnist.py --master 'local-cluster[2,1,1024]' --num-proc 2 --epochs 2

Without --data-dir/mnist.bz2 it writes generated digits there first (mnist_libsvm.py).
"""

import argparse
import os
import sys

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from pyspark import SparkConf
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.sql import SparkSession
from pyspark.sql import functions as SF
from pyspark.sql import types as T

from horovod_rs.spark.common.backend import SparkBackend
from horovod_rs.spark.common.store import Store
from horovod_rs.spark.lightning import TorchEstimator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import mnist_libsvm  # noqa: E402


class Net(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=5)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5)
        self.fc1 = nn.Linear(256, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, features):
        x = features.float().reshape(-1, 1, 28, 28)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.5)

    def training_step(self, batch, batch_idx):
        loss = F.nll_loss(self(batch["features"]), batch["label"].long())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        output = self(batch["features"])
        self.log("val_loss", F.nll_loss(output, batch["label"].long()))
        self.log("val_accuracy", (output.argmax(dim=1) == batch["label"].long()).float().mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows", type=int, default=3000, help="rows to generate when there is no data file")
    parser.add_argument("--work-dir", default="/tmp/horovod_rs-mnist")
    parser.add_argument("--data-dir", default="/tmp/horovod_rs-mnist")
    parser.add_argument("--min-accuracy", type=float, default=0.0)
    args = parser.parse_args()

    conf = SparkConf().setAppName("lightning_mnist")
    if args.master:
        conf.setMaster(args.master)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    path = os.path.join(args.data_dir, "mnist.bz2")
    if not os.path.exists(path):
        mnist_libsvm.write(path, args.rows)
    df = spark.read.format("libsvm").option("numFeatures", "784").load(path)
    train_df, test_df = df.randomSplit([0.9, 0.1], seed=1)

    backend = SparkBackend(num_proc=args.num_proc, stdout=sys.stdout, stderr=sys.stderr,
                           prefix_output_with_timestamp=True)
    estimator = TorchEstimator(backend=backend, store=Store.create(args.work_dir), model=Net(),
                               input_shapes=[[-1, 1, 28, 28]], feature_cols=["features"], label_cols=["label"],
                               batch_size=args.batch_size, epochs=args.epochs, validation=0.1, verbose=1)
    lightning_model = estimator.fit(train_df).setOutputCols(["label_prob"])
    print("History:", {k: round(float(v), 4) for k, v in lightning_model.getHistory().items()})

    predictions = lightning_model.transform(test_df)
    argmax = SF.udf(lambda v: float(np.argmax(v)), returnType=T.DoubleType())
    predictions = predictions.withColumn("label_pred", argmax(predictions.label_prob))
    accuracy = MulticlassClassificationEvaluator(predictionCol="label_pred", labelCol="label",
                                                 metricName="accuracy").evaluate(predictions)
    print("Test accuracy:", accuracy)
    spark.stop()
    if accuracy < args.min_accuracy:
        sys.exit("accuracy %.3f is below %.3f" % (accuracy, args.min_accuracy))


if __name__ == "__main__":
    main()
