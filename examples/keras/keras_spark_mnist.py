"""Horovod's Keras-on-Spark MNIST recipe, written against horovod_rs (only the imports differ from a
Horovod script): a convolutional net fit with KerasEstimator on a libsvm DataFrame, one-hot labels
as sparse vectors, predictions as probability vectors, accuracy with Spark's evaluator.

    python examples/keras/keras_spark_mnist.py --master 'local-cluster[2,1,1024]' --num-proc 2 \
        --data-dir DIR --work-dir DIR

``DIR/mnist.bz2`` must exist (MNIST in libsvm format, or generated data of the same shape)."""

import argparse
import os
import sys

import numpy as np
import pyspark.sql.types as T
from pyspark import SparkConf
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.feature import OneHotEncoder
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from tensorflow import keras
from tensorflow.keras.layers import Conv2D, Dense, Dropout, Flatten, MaxPooling2D
from tensorflow.keras.models import Sequential

import horovod_rs.spark.keras as hvd
from horovod_rs.spark.common.backend import SparkBackend
from horovod_rs.spark.common.store import Store

parser = argparse.ArgumentParser(description="Keras Spark MNIST Example")
parser.add_argument("--master", help="spark master to connect to")
parser.add_argument("--num-proc", type=int, help="number of worker processes for training")
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--epochs", type=int, default=12)
parser.add_argument("--work-dir", default="/tmp", help="the store's directory")
parser.add_argument("--data-dir", default="/tmp", help="where mnist.bz2 is")
parser.add_argument("--min-accuracy", type=float, default=0.0, help="exit 1 below this test accuracy")

if __name__ == "__main__":
    args = parser.parse_args()
    conf = SparkConf().setAppName("keras_spark_mnist").set("spark.sql.shuffle.partitions", "16")
    if args.master:
        conf.setMaster(args.master)
    elif args.num_proc:
        conf.setMaster("local[{}]".format(args.num_proc))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    store = Store.create(args.work_dir)

    df = spark.read.format("libsvm").option("numFeatures", "784").load(os.path.join(args.data_dir, "mnist.bz2"))
    encoder = OneHotEncoder(inputCols=["label"], outputCols=["label_vec"], dropLast=False)
    train_df = encoder.fit(df).transform(df)
    train_df, test_df = train_df.randomSplit([0.9, 0.1], seed=1)

    model = Sequential()
    model.add(Conv2D(8, kernel_size=(3, 3), activation="relu", input_shape=(28, 28, 1)))
    model.add(MaxPooling2D(pool_size=(2, 2)))
    model.add(Dropout(0.25))
    model.add(Flatten())
    model.add(Dense(32, activation="relu"))
    model.add(Dense(10, activation="softmax"))

    backend = SparkBackend(num_proc=args.num_proc, stdout=sys.stdout, stderr=sys.stderr,
                           prefix_output_with_timestamp=True)
    keras_estimator = hvd.KerasEstimator(backend=backend, store=store, model=model,
                                         optimizer=keras.optimizers.Adadelta(1.0),
                                         loss=keras.losses.categorical_crossentropy, metrics=["accuracy"],
                                         feature_cols=["features"], label_cols=["label_vec"],
                                         batch_size=args.batch_size, epochs=args.epochs, random_seed=1,
                                         inmemory_cache_all=True, verbose=1)
    keras_model = keras_estimator.fit(train_df).setOutputCols(["label_prob"])

    pred_df = keras_model.transform(test_df)
    argmax = udf(lambda v: float(np.argmax(v)), returnType=T.DoubleType())
    pred_df = pred_df.withColumn("label_pred", argmax(pred_df.label_prob))
    evaluator = MulticlassClassificationEvaluator(predictionCol="label_pred", labelCol="label",
                                                  metricName="accuracy")
    accuracy = evaluator.evaluate(pred_df)
    print("Test accuracy:", accuracy)
    spark.stop()
    sys.exit(0 if accuracy >= args.min_accuracy else 1)
