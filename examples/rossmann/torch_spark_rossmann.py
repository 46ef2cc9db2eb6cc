"""The Rossmann tutorial with PyTorch: the Keras example's data preparation and model, written for
Horovod's ``TorchEstimator`` (``horovod_rs.spark.torch``): 36 inputs of shape ``[-1, 1]``, a
10-wide embedding per categorical column, the continuous columns batch-normalized, four dense
layers, a sigmoid scaled to the log of the largest sales, L1 loss, Adam and an ``exp_rmspe``
metric; then ``transform`` on the test set and a submission CSV.

    python examples/rossmann/torch_spark_rossmann.py --master 'local-cluster[2,1,1024]' --num-proc 2 \\
        --stores 60 --epochs 5 --batch-size 256 --learning_rate 0.001

``--max-val-rmspe`` makes it a test: it exits 1 when the RMSPE on the held-out 2014 rows,
predicted through ``transform``, is not below that.
"""

import argparse
import math
import os
import sys

from pyspark import SparkConf
from pyspark.sql import SparkSession

import torch
import torch.nn as nn

import horovod_rs.spark.torch as hvd
from horovod_rs.spark.common.backend import SparkBackend
from horovod_rs.spark.common.store import Store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rossmann_data  # noqa: E402
from rossmann_data import ALL_COLS, CATEGORICAL_COLS, CONTINUOUS_COLS  # noqa: E402

parser = argparse.ArgumentParser(description='PyTorch Spark Rossmann Estimator Example on horovod_rs',
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
parser.add_argument('--local-submission-csv', default='submission-torch.csv',
                    help='output submission predictions CSV')
parser.add_argument('--local-checkpoint-file', default='checkpoint-torch',
                    help='model checkpoint')
parser.add_argument('--work-dir', default='/tmp',
                    help='temporary working directory to write intermediate files (prefix with hdfs:// to use HDFS)')
parser.add_argument('--max-val-rmspe', type=float,
                    help='exit 1 unless the RMSPE on the validation rows, predicted by transform, is below this')


class RossmannModel(nn.Module):
    """The tutorial's model in PyTorch; ``forward`` takes the 36 columns in ``ALL_COLS`` order, each
    of shape ``(batch, 1)`` (the estimator sends them as floats: the categoricals are indices)."""

    def __init__(self, vocab, max_sales):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(len(vocab[col]), 10) for col in CATEGORICAL_COLS])
        self.continuous_bn = nn.BatchNorm1d(len(CONTINUOUS_COLS))
        width = 10 * len(CATEGORICAL_COLS) + len(CONTINUOUS_COLS)
        self.layers = nn.Sequential(
            nn.Linear(width, 1000), nn.ReLU(),
            nn.Linear(1000, 1000), nn.ReLU(),
            nn.Linear(1000, 1000), nn.ReLU(),
            nn.Linear(1000, 500), nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(500, 1))
        # Sigmoid scaled to logarithm of maximum sales scaled by 20%.
        self.output_scale = math.log(max_sales) * 1.2
        # Keras's initial weights (PyTorch's larger N(0, 1) embeddings drive the scaled sigmoid
        # into saturation in the first steps, where its gradient vanishes and training stalls).
        for embedding in self.embeddings:
            nn.init.uniform_(embedding.weight, -0.05, 0.05)
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)

    def forward(self, *inputs):
        categorical = inputs[:len(CATEGORICAL_COLS)]
        continuous = torch.cat([x.reshape(-1, 1).float() for x in inputs[len(CATEGORICAL_COLS):]], dim=1)
        embedded = [embedding(x.reshape(-1).long()) for embedding, x in zip(self.embeddings, categorical)]
        x = torch.cat(embedded + [self.continuous_bn(continuous)], dim=1)
        return torch.sigmoid(self.layers(x)) * self.output_scale


def exp_rmspe(output, label):
    """Competition evaluation metric, expects logarithic inputs."""
    label = label.reshape(output.shape)
    pct = torch.square((torch.exp(label) - torch.exp(output)) / torch.exp(label))
    counted = label > 0.001
    return torch.sqrt(pct[counted].sum() / counted.sum().clamp(min=1))


def main(args):
    print('================')
    print('Data preparation')
    print('================')

    conf = SparkConf().setAppName('PyTorch Spark Rossmann Estimator Example') \
        .set('spark.sql.shuffle.partitions', '16').set('spark.ui.showConsoleProgress', 'false')
    if args.master:
        conf.setMaster(args.master)
    elif args.num_proc:
        conf.setMaster('local[{}]'.format(args.num_proc))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()

    data_dir = rossmann_data.find_or_generate_data(args.data_dir, args.work_dir, args.stores)
    prepared = rossmann_data.prepare(spark, data_dir, args.sample_rate)
    train_df, test_df = prepared.train_df, prepared.test_df
    rossmann_data.show_sizes(prepared)

    print('==============')
    print('Model training')
    print('==============')

    model = RossmannModel(prepared.vocab, prepared.max_sales)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate, eps=1e-3)

    store = Store.create(args.work_dir)
    backend = SparkBackend(num_proc=args.num_proc, stdout=sys.stdout, stderr=sys.stderr,
                           prefix_output_with_timestamp=True)
    torch_estimator = hvd.TorchEstimator(backend=backend,
                                         store=store,
                                         model=model,
                                         optimizer=optimizer,
                                         loss=lambda output, label: nn.functional.l1_loss(output, label),
                                         metrics=[[exp_rmspe]],  # one group: this metric on every output
                                         input_shapes=[[-1, 1]] * len(ALL_COLS),
                                         feature_cols=ALL_COLS,
                                         label_cols=['Sales'],
                                         validation='Validation',
                                         batch_size=args.batch_size,
                                         epochs=args.epochs,
                                         verbose=1)

    torch_model = torch_estimator.fit(train_df).setOutputCols(['Sales_output'])
    history = torch_model.getHistory()
    print('Last epoch: %s' % (history[-1] if isinstance(history, list) else
                              {k: v[-1] for k, v in history.items()}))

    torch_model.write().overwrite().save(args.local_checkpoint_file)
    print('Written checkpoint to %s' % args.local_checkpoint_file)

    val_rmspe, baseline = rossmann_data.evaluate(torch_model, train_df)
    print('Validation RMSPE through transform: %f (each store\'s median sales: %f)' % (val_rmspe, baseline))

    print('================')
    print('Final prediction')
    print('================')

    rossmann_data.write_submission(torch_model, test_df, args.local_submission_csv)

    spark.stop()
    if args.max_val_rmspe is not None and not val_rmspe < args.max_val_rmspe:
        print('FAILED: validation RMSPE %f is not below %f' % (val_rmspe, args.max_val_rmspe))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(parser.parse_args()))
