"""The floors of ``make bench-estimator``: the same training as a fit's, with nothing around it.
Each process (one thread, as a Spark task's one core) takes every size-th row of the arrays in
``--data`` (features, label, validation mask; in memory), trains ``bench_models``' model for the
epochs and batch size given, validating after each epoch, and rank 0 prints one JSON line:
``{"train": s, "validation": s}`` (the seconds of each, summed over the epochs).

- ``--framework torch`` (run by ``torch.distributed.run``): DistributedDataParallel over gloo;
- ``--framework lightning`` (run by ``torch.distributed.run``): Lightning's ``Trainer.fit`` of
  ``bench_models``' LightningModule with its DDP strategy over gloo, so a Lightning fit is set
  against Lightning's own loop and not only torch's;
- ``--framework keras`` (``--rank`` and ``--size`` given, the processes started together): Keras's
  ``model.fit`` on the arrays, with no exchange between the processes: TensorFlow's compute alone,
  a floor below any data-parallel Keras. With ``--multiworker PORT``, Keras's own data parallelism
  instead: the same fit under TensorFlow's ``MultiWorkerMirroredStrategy`` (gradients averaged over
  gRPC; the processes listen on PORT, PORT+1, ...), each process still on its own rows (Keras 2
  only: run it with ``TF_USE_LEGACY_KERAS=1``).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["torch", "lightning", "keras"], default="torch")
    parser.add_argument("--rank", type=int, help="keras: this process's rank")
    parser.add_argument("--size", type=int, help="keras: the number of processes")
    parser.add_argument("--multiworker", type=int, metavar="PORT",
                        help="keras: train under MultiWorkerMirroredStrategy, the processes at PORT, PORT+1, ...")
    parser.add_argument("--case", choices=["mlp", "mnist"], required=True)
    parser.add_argument("--data", required=True, help=".npz with features, label, validation")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    seconds = {"torch": torch_floor, "lightning": lightning_floor, "keras": keras_floor}[args.framework](args)
    if seconds is not None:
        print(json.dumps(seconds), flush=True)


def my_rows(path, rank, size, batch):
    """``(features, label, validation, steps)``: this process's rows of the arrays in ``path``
    (every size-th row) and the steps of an epoch, the same on every process as on a fit's ranks:
    the mean share of the training rows."""
    arrays = np.load(path)
    everyone = arrays["validation"]
    mine = slice(rank, None, size)
    return (arrays["features"][mine], arrays["label"][mine], everyone[mine],
            int((~everyone).sum()) // size // batch)


def torch_floor(args):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    *rows, steps = my_rows(args.data, rank, size, args.batch)
    features, label, validation = (torch.from_numpy(a) for a in rows)
    x, y = features[~validation], label[~validation]
    val_x, val_y = features[validation], label[validation]
    model = torch.nn.parallel.DistributedDataParallel(bench_models.torch_model(args.case, args.hidden))
    optimizer = bench_models.torch_optimizer(args.case, model, size)
    loss_fn = bench_models.torch_loss(args.case)
    seconds = {"train": 0.0, "validation": 0.0}
    for _ in range(args.epochs):
        started = time.perf_counter()
        model.train()
        order = torch.randperm(len(x)).repeat(2)  # a process with fewer rows than the mean wraps around
        for step in range(steps):
            rows = order[step * args.batch:(step + 1) * args.batch]
            optimizer.zero_grad()
            loss_fn(model(x[rows]), y[rows]).backward()
            optimizer.step()
        seconds["train"] += time.perf_counter() - started
        started = time.perf_counter()
        model.eval()
        with torch.no_grad():
            for first in range(0, len(val_x), args.batch):
                loss_fn(model.module(val_x[first:first + args.batch]), val_y[first:first + args.batch])
        seconds["validation"] += time.perf_counter() - started
    dist.barrier()
    dist.destroy_process_group()
    return seconds if rank == 0 else None


def lightning_floor(args):
    import pytorch_lightning as pl
    import torch

    torch.set_num_threads(1)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    *rows, steps = my_rows(args.data, rank, size, args.batch)
    features, label, validation = (torch.from_numpy(a) for a in rows)
    train = _Batches(features[~validation], label[~validation], args.batch, steps, shuffle=True)
    val = _Batches(features[validation], label[validation], args.batch, None, shuffle=False)
    laps = _LightningLaps(pl)
    trainer = pl.Trainer(accelerator="cpu", devices=size, strategy="ddp", max_epochs=args.epochs,
                         use_distributed_sampler=False, callbacks=[laps], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    train_loader, val_loader = (torch.utils.data.DataLoader(batches, batch_size=None) for batches in (train, val))
    trainer.fit(bench_models.lightning_module(args.case, args.hidden), train_loader, val_loader if len(val) else None)
    return laps.seconds if rank == 0 else None


class _Batches:
    """A process's rows as Lightning's batches (Horovod's dicts of ``features`` and ``label``),
    whole batches at a time as the torch floor takes them; ``steps`` batches (wrapping around),
    reshuffled each pass, or every row once in order."""

    def __init__(self, features, label, batch, steps, shuffle):
        import torch

        self.torch, self.features, self.label, self.batch, self.shuffle = torch, features, label, batch, shuffle
        self.steps = steps if steps is not None else -(-len(features) // batch)
        self.order = None

    def __len__(self):
        return self.steps if len(self.features) else 0

    def __getitem__(self, step):
        if step == 0 or self.order is None:
            n = len(self.features)
            self.order = self.torch.randperm(n).repeat(2) if self.shuffle else self.torch.arange(n)
        rows = self.order[step * self.batch:(step + 1) * self.batch]
        return {"features": self.features[rows], "label": self.label[rows]}


def _LightningLaps(pl):
    """A Lightning callback that sums the seconds of each epoch's training and validation."""

    class Laps(pl.Callback):
        def __init__(self):
            super().__init__()
            self.seconds, self.started = {"train": 0.0, "validation": 0.0}, None

        def on_train_epoch_start(self, trainer, module):
            self.started = time.perf_counter()

        def on_validation_epoch_start(self, trainer, module):
            self.seconds["train"] += time.perf_counter() - self.started
            self.started = time.perf_counter()

        def on_validation_epoch_end(self, trainer, module):
            self.seconds["validation"] += time.perf_counter() - self.started
            self.started = time.perf_counter()

        def on_train_epoch_end(self, trainer, module):
            self.seconds["train"] += time.perf_counter() - self.started
            self.started = time.perf_counter()

    return Laps()


def keras_floor(args):
    if args.multiworker:  # read when the strategy is made
        workers = ["localhost:%d" % (args.multiworker + r) for r in range(args.size)]
        os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                              "task": {"type": "worker", "index": args.rank}})
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if args.multiworker else tf.distribute.get_strategy()
    # The strategy splits each batch a process's dataset yields over the job's replicas (one per
    # process): batches of batch x size give each replica the batch a floor process takes.
    batch = args.batch * (args.size if args.multiworker else 1)
    features, label, validation, steps = my_rows(args.data, args.rank, args.size, args.batch)
    if args.case == "mnist":  # one-hot labels, as the KerasEstimator case learns them
        label = np.eye(10, dtype=np.float32)[label.astype(np.int64)]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    x, y = features[~validation], label[~validation]
    # Passes back to back in exact batches, as a fit's ranks take them (a process with fewer rows
    # than the mean wraps around).
    train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).repeat().batch(batch, drop_remainder=True)
    val = tf.data.Dataset.from_tensor_slices((features[validation], label[validation])).batch(batch) \
        if validation.any() else None
    with strategy.scope():
        model = bench_models.keras_model(args.case, args.hidden)
        optimizer, loss = bench_models.keras_training(args.case)
        optimizer.learning_rate = optimizer.learning_rate * args.size
        model.compile(optimizer=optimizer, loss=loss)
    laps = _KerasLaps(tf)
    model.fit(train.with_options(options), steps_per_epoch=steps, epochs=args.epochs, callbacks=[laps], verbose=0,
              validation_data=val.with_options(options) if val is not None else None,
              shuffle=False)  # (the dataset shuffles)
    return laps.seconds if args.rank == 0 else None


def _KerasLaps(tf):
    """A Keras callback that sums the seconds of each epoch's training and validation."""

    class Laps(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds, self.phase, self.started = {"train": 0.0, "validation": 0.0}, None, None

        def lap(self, next_phase):
            now = time.perf_counter()
            if self.phase is not None:
                self.seconds[self.phase] += now - self.started
            self.phase, self.started = next_phase, now

        def on_epoch_begin(self, epoch, logs=None):
            self.lap("train")

        def on_test_begin(self, logs=None):
            self.lap("validation")

        def on_epoch_end(self, epoch, logs=None):
            self.lap(None)

    return Laps()


if __name__ == "__main__":
    main()
