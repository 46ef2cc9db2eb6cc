"""Horovod's Rossmann tutorial (``examples/spark/keras/keras_spark_rossmann_estimator.py``) on
horovod_rs: the same data preparation, the same 36-input model with ``exp_rmspe`` and
``act_sigmoid_scaled``, KerasEstimator with ``BestModelCheckpoint``, then ``transform`` on the
test set and a submission CSV.

Besides the imports, what differs from Horovod's file is what Keras 3 requires (docs/rossmann.md):
``Adam(learning_rate=...)`` instead of ``lr=``, no ``input_length`` on ``Embedding``, and no
TensorFlow 1 branch. The data preparation lives in ``rossmann_data.py`` so that the PyTorch and
Flyte examples share it. Without ``--data-dir`` the example generates files with Kaggle's schemas
(``generate_data.py``), and ``--max-val-rmspe`` makes it a test: it exits 1 when the model's
RMSPE on the held-out 2014 rows, predicted through ``transform``, is not below that.

    python examples/rossmann/keras_spark_rossmann.py --master 'local-cluster[2,1,1024]' --num-proc 2 \\
        --stores 60 --epochs 5 --batch-size 256 --learning_rate 0.001
"""

import argparse
import os
import sys

from pyspark import SparkConf
from pyspark.sql import SparkSession

import tensorflow as tf
from tensorflow.keras.layers import Input, Embedding, Concatenate, Dense, Flatten, Reshape, BatchNormalization, Dropout

import horovod_rs.spark.keras as hvd
from horovod_rs.spark.common.backend import SparkBackend
from horovod_rs.spark.common.store import Store
from horovod_rs.tensorflow.keras.callbacks import BestModelCheckpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rossmann_data  # noqa: E402
from rossmann_data import ALL_COLS, CATEGORICAL_COLS, CONTINUOUS_COLS  # noqa: E402

parser = argparse.ArgumentParser(description='Keras Spark Rossmann Estimator Example on horovod_rs',
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--master',
                    help='spark cluster to use for training. If set to None, uses current default cluster.')
parser.add_argument('--num-proc', type=int,
                    help='number of worker processes for training, default: `spark.default.parallelism`')
parser.add_argument('--learning_rate', type=float, default=0.0001,
                    help='initial learning rate')
parser.add_argument('--batch-size', type=int, default=100,
                    help='batch size')
parser.add_argument('--epochs', type=int, default=100,
                    help='number of epochs to train')
parser.add_argument('--sample-rate', type=float,
                    help='desired sampling rate. Useful to set to low number (e.g. 0.01) to make sure that '
                         'end-to-end process works')
parser.add_argument('--data-dir',
                    help='directory (or URI) holding the Rossmann CSV files; default: generate them')
parser.add_argument('--stores', type=int, default=100,
                    help='stores in the generated files (without --data-dir); the real data has 1115')
parser.add_argument('--local-submission-csv', default='submission.csv',
                    help='output submission predictions CSV')
parser.add_argument('--local-checkpoint-file', default='checkpoint',
                    help='model checkpoint')
parser.add_argument('--work-dir', default='/tmp',
                    help='temporary working directory to write intermediate files (prefix with hdfs:// to use HDFS)')
parser.add_argument('--max-val-rmspe', type=float,
                    help='exit 1 unless the RMSPE on the validation rows, predicted by transform, is below this')


def exp_rmspe(y_true, y_pred):
    """Competition evaluation metric, expects logarithic inputs."""
    pct = tf.square((tf.exp(y_true) - tf.exp(y_pred)) / tf.exp(y_true))
    # Compute mean excluding stores with zero denominator.
    x = tf.reduce_sum(tf.where(y_true > 0.001, pct, tf.zeros_like(pct)))
    y = tf.reduce_sum(tf.where(y_true > 0.001, tf.ones_like(pct), tf.zeros_like(pct)))
    return tf.sqrt(x / y)


def build_model(vocab, max_sales):
    """The tutorial's model: a 10-wide embedding per categorical column, the continuous columns
    batch-normalized, four dense layers and a sigmoid scaled to the log of the largest sales."""

    def act_sigmoid_scaled(x):
        """Sigmoid scaled to logarithm of maximum sales scaled by 20%."""
        return tf.nn.sigmoid(x) * tf.math.log(max_sales) * 1.2

    inputs = {col: Input(shape=(1,), name=col) for col in ALL_COLS}
    embeddings = [Embedding(len(vocab[col]), 10, name='emb_' + col)(inputs[col])
                  for col in CATEGORICAL_COLS]
    continuous_bn = Concatenate()([Reshape((1, 1), name='reshape_' + col)(inputs[col])
                                   for col in CONTINUOUS_COLS])
    continuous_bn = BatchNormalization()(continuous_bn)
    x = Concatenate()(embeddings + [continuous_bn])
    x = Flatten()(x)
    x = Dense(1000, activation='relu', kernel_regularizer=tf.keras.regularizers.l2(0.00005))(x)
    x = Dense(1000, activation='relu', kernel_regularizer=tf.keras.regularizers.l2(0.00005))(x)
    x = Dense(1000, activation='relu', kernel_regularizer=tf.keras.regularizers.l2(0.00005))(x)
    x = Dense(500, activation='relu', kernel_regularizer=tf.keras.regularizers.l2(0.00005))(x)
    x = Dropout(0.5)(x)
    output = Dense(1, activation=act_sigmoid_scaled)(x)
    model = tf.keras.Model([inputs[f] for f in ALL_COLS], output)
    return model, act_sigmoid_scaled


def make_estimator(vocab, max_sales, num_proc, work_dir, batch_size, epochs, learning_rate):
    """The tutorial's KerasEstimator (with its model, metric and checkpoint callback)."""
    model, act_sigmoid_scaled = build_model(vocab, max_sales)
    model.summary()
    CUSTOM_OBJECTS = {'exp_rmspe': exp_rmspe,
                      'act_sigmoid_scaled': act_sigmoid_scaled}

    opt = tf.keras.optimizers.Adam(learning_rate=learning_rate, epsilon=1e-3)

    # Checkpoint callback to specify options for the returned Keras model
    ckpt_callback = BestModelCheckpoint(monitor='val_loss', mode='auto', save_freq='epoch')

    # Horovod: run training.
    store = Store.create(work_dir)
    backend = SparkBackend(num_proc=num_proc,
                           stdout=sys.stdout, stderr=sys.stderr,
                           prefix_output_with_timestamp=True)
    return hvd.KerasEstimator(backend=backend,
                              store=store,
                              model=model,
                              optimizer=opt,
                              loss='mae',
                              metrics=[exp_rmspe],
                              custom_objects=CUSTOM_OBJECTS,
                              feature_cols=ALL_COLS,
                              label_cols=['Sales'],
                              validation='Validation',
                              batch_size=batch_size,
                              epochs=epochs,
                              verbose=2,
                              checkpoint_callback=ckpt_callback)


def main(args):
    # ================ #
    # DATA PREPARATION #
    # ================ #

    print('================')
    print('Data preparation')
    print('================')

    conf = SparkConf().setAppName('Keras Spark Rossmann Estimator Example').set('spark.sql.shuffle.partitions', '16') \
        .set('spark.ui.showConsoleProgress', 'false')
    if args.master:
        conf.setMaster(args.master)
    elif args.num_proc:
        conf.setMaster('local[{}]'.format(args.num_proc))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()

    data_dir = rossmann_data.find_or_generate_data(args.data_dir, args.work_dir, args.stores)
    prepared = rossmann_data.prepare(spark, data_dir, args.sample_rate)
    train_df, test_df, vocab, max_sales = prepared.train_df, prepared.test_df, prepared.vocab, prepared.max_sales

    print('===================================')
    print('Data frame with transformed columns')
    print('===================================')
    train_df.show(5)

    print('================')
    print('Data frame sizes')
    print('================')
    rossmann_data.show_sizes(prepared)

    # ============== #
    # MODEL TRAINING #
    # ============== #

    print('==============')
    print('Model training')
    print('==============')

    keras_estimator = make_estimator(vocab, max_sales, args.num_proc, args.work_dir, args.batch_size, args.epochs,
                                     args.learning_rate)
    keras_model = keras_estimator.fit(train_df).setOutputCols(['Sales_output'])

    history = keras_model.getHistory()
    best_val_rmspe = min(history['val_exp_rmspe'])
    print('Best RMSPE: %f' % best_val_rmspe)

    # Save the trained model (Spark ML persistence: a directory).
    keras_model.write().overwrite().save(args.local_checkpoint_file)
    print('Written checkpoint to %s' % args.local_checkpoint_file)

    # ========== #
    # EVALUATION #
    # ========== #

    # The held-out 2014 rows through transform, against each store's median sales as a baseline.
    val_rmspe, baseline = rossmann_data.evaluate(keras_model, train_df)
    print('Validation RMSPE through transform: %f (each store\'s median sales: %f)' % (val_rmspe, baseline))

    # ================ #
    # FINAL PREDICTION #
    # ================ #

    print('================')
    print('Final prediction')
    print('================')

    rossmann_data.write_submission(keras_model, test_df, args.local_submission_csv)

    spark.stop()
    if args.max_val_rmspe is not None and not val_rmspe < args.max_val_rmspe:
        print('FAILED: validation RMSPE %f is not below %f' % (val_rmspe, args.max_val_rmspe))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(parser.parse_args()))
