"""make bench-python: training steps/s of a Rossmann-shaped MLP (198-1000-1000-1000-500-1) on
several processes, horovod_rs's DistributedOptimizer against torch's DistributedDataParallel
(gloo), and two floors: the same job with no communication (--impl none: each process steps its
own model, as many processes at once, so they share the cores and memory as the others do), and
the same job in lockstep (--impl sync: after each backward pass the processes allreduce 4 bytes,
the loss, and exchange no gradient: every step waits for the slower process, as in any synchronous
data parallelism; it also waits out one engine round trip, which an exchange that starts during
backward partly hides, so a DistributedOptimizer may step faster), and in lockstep without the
engine (--impl pipe: the processes meet through named pipes instead, the kernel waking each
waiting process directly: the least any synchronous step pays, so ``sync`` less ``pipe`` is the
engine's share); and the same model in Keras (``model.fit``), with horovod_rs's Keras
DistributedOptimizer (--impl keras), without (--impl keras_none) and in lockstep (--impl
keras_sync: a 4-byte allreduce of the gradients' sum before each update; --impl keras_pipe: the
named pipes' meeting there instead). Run under `horovodrs -np N` (all but ddp) or
`torch.distributed.run` (ddp); rank 0 prints `impl,procs,batch,steps_per_s,model`. ``--model
mnist`` runs Horovod's MNIST conv net (``bench_models``') instead (batch 64): a small model,
whose step is short beside the exchange's latency.
"""

import argparse
import os
import shutil
import sys
import time

# The MNIST net is make bench-estimator's (Horovod's Spark example net), one definition for both.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "examples", "bench"))
import bench_models  # noqa: E402

WARMUP, STEPS = 5, 100
WIDTHS = (1000, 1000, 1000, 500)


def model(name):
    import torch

    torch.manual_seed(0)
    if name == "mnist":
        return bench_models.torch_model("mnist")
    layers, width = [], 198
    for units in WIDTHS:
        layers += [torch.nn.Linear(width, units), torch.nn.ReLU()]
        width = units
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def train(net, optimizer, batch, rank, name, lockstep=None):
    """Steps/s; ``lockstep(loss)``, when given, runs between each backward pass and update."""
    import torch

    g = torch.Generator().manual_seed(rank)
    if name == "mnist":
        x, y = torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g)
        loss = torch.nn.functional.nll_loss
    else:
        x, y = torch.randn(batch, 198, generator=g), torch.randn(batch, 1, generator=g)
        loss = torch.nn.functional.l1_loss
    steps = STEPS * (5 if name == "mnist" else 1)  # (its steps are 10 times shorter)
    for step in range(WARMUP + steps):
        if step == WARMUP:
            started = time.perf_counter()
        optimizer.zero_grad()
        value = loss(net(x), y)
        value.backward()
        if lockstep is not None:
            lockstep(value.detach().reshape(1))
        optimizer.step()
    return steps / (time.perf_counter() - started)


class PipeMeeting:
    """The processes of one host meet without the engine: every rank has a named pipe in a
    directory they share; ``meet()`` has each rank but 0 write a byte to rank 0's pipe and wait
    for one in its own, which rank 0 writes once it has read every rank's."""

    def __init__(self, rank, size, broadcast_object, barrier):
        import tempfile

        directory = broadcast_object(tempfile.mkdtemp(prefix="bench-pipes-") if rank == 0 else None)
        path = os.path.join(directory, "%d" % rank)
        os.mkfifo(path)
        self.mine = os.open(path, os.O_RDWR)  # (read-write: opening blocks on no writer)
        barrier()
        others = range(1, size) if rank == 0 else [0]
        self.theirs = [os.open(os.path.join(directory, "%d" % r), os.O_WRONLY) for r in others]
        self.rank, self.size = rank, size
        barrier()
        if rank == 0:  # open pipes outlive their names
            shutil.rmtree(directory)

    def meet(self, *_):
        if self.rank == 0:
            for _ in range(self.size - 1):
                os.read(self.mine, 1)
            for pipe in self.theirs:
                os.write(pipe, b"x")
        else:
            os.write(self.theirs[0], b"x")
            os.read(self.mine, 1)


def _lockstep_optimizer(optimizer, hvd, hvd_tf, meeting=None):
    """``optimizer``, whose every update first allreduces 4 bytes that depend on the step's
    gradients (their sum), or meets through ``meeting`` (a ``PipeMeeting``): the ranks step in
    lockstep, exchanging no gradient."""
    import tensorflow as tf

    def meet(total):
        meeting.meet()
        return total

    def lockstep(grads):
        total = tf.reshape(tf.add_n([tf.reduce_sum(g) for g in grads if g is not None]), [1])
        done = hvd_tf.allreduce(total, name="lockstep") if meeting is None else \
            tf.py_function(meet, [total], Tout=tf.float32)
        with tf.control_dependencies([done]):
            return [None if g is None else tf.identity(g) for g in grads]

    if hvd._is_keras3(optimizer):
        class Lockstep(type(optimizer)):
            def apply(self, grads, trainable_variables=None):
                return super().apply(lockstep(list(grads)), trainable_variables)
    else:
        class Lockstep(type(optimizer)):
            def apply_gradients(self, grads_and_vars, *args, **kwargs):
                grads, variables = zip(*grads_and_vars)
                return super().apply_gradients(zip(lockstep(list(grads)), variables), *args, **kwargs)
    return Lockstep.from_config(optimizer.get_config())


def keras_steps_per_s(impl, batch, name):
    """The model's steps/s in Keras's ``model.fit`` (one thread, as a Spark task's), the same batch
    every step as the torch rows."""
    os.environ["OMP_NUM_THREADS"] = "1"  # TensorFlow's oneDNN kernels too (Spark sets it for a task)
    import tensorflow as tf

    import horovod_rs.tensorflow as hvd_tf
    import horovod_rs.tensorflow.keras as hvd

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    keras = tf.keras
    g = tf.random.Generator.from_seed(hvd.rank())
    if name == "mnist":
        net = bench_models.keras_model("mnist")
        optimizer, loss = bench_models.keras_training("mnist")
        labels = tf.one_hot(g.uniform([batch], 0, 10, dtype=tf.int32), 10)
        data = tf.data.Dataset.from_tensors((g.normal([batch, 784]), labels)).repeat()
    else:
        layers = [keras.Input((198,))] + [keras.layers.Dense(units, activation="relu") for units in WIDTHS]
        net = keras.Sequential(layers + [keras.layers.Dense(1)])
        optimizer, loss = keras.optimizers.Adam(1e-4), "mae"
        data = tf.data.Dataset.from_tensors((g.normal([batch, 198]), g.normal([batch, 1]))).repeat()
    if impl == "keras":
        optimizer = hvd.DistributedOptimizer(optimizer)
    elif impl == "keras_sync":
        optimizer = _lockstep_optimizer(optimizer, hvd, hvd_tf)
    elif impl == "keras_pipe":
        optimizer = _lockstep_optimizer(optimizer, hvd, hvd_tf,
                                        PipeMeeting(hvd.rank(), hvd.size(), hvd_tf.broadcast_object, hvd_tf.barrier))
    net.compile(optimizer, loss=loss)
    # Without tf.data's autotuning (as the KerasEstimator's pipelines): with it, both rows' steps
    # fell on a few fixed rates run to run (19.6, 39.3, 55.3 steps/s), whatever the exchange.
    options = tf.data.Options()
    options.autotune.enabled = False
    data = data.with_options(options)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if impl == "keras" else []
    steps = STEPS * (5 if name == "mnist" else 1)
    net.fit(data, epochs=1, steps_per_epoch=WARMUP, verbose=0, shuffle=False, callbacks=callbacks)
    hvd_tf.barrier()
    started = time.perf_counter()
    net.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
    steps_per_s = steps / (time.perf_counter() - started)
    hvd_tf.barrier()  # (without an exchange the other process may still be stepping)
    return hvd.rank(), hvd.size(), steps_per_s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True,
                        choices=["horovod_rs", "ddp", "none", "sync", "pipe", "keras", "keras_none", "keras_sync",
                                 "keras_pipe"])
    parser.add_argument("--batch", type=int, help="default 256 (mlp), 64 (mnist)")
    parser.add_argument("--model", choices=["mlp", "mnist"], default="mlp")
    args = parser.parse_args()
    if args.batch is None:
        args.batch = 64 if args.model == "mnist" else 256
    if args.impl.startswith("keras"):
        rank, procs, steps_per_s = keras_steps_per_s(args.impl, args.batch, args.model)
        if rank == 0:
            print("%s,%d,%d,%.2f,%s" % (args.impl, procs, args.batch, steps_per_s, args.model), flush=True)
        os._exit(0)
    import torch  # (not before Keras's runs: its OpenMP would start with every core)

    torch.set_num_threads(1)  # one core per process, as in a Spark task
    net = model(args.model)
    if args.impl == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, procs = dist.get_rank(), dist.get_world_size()
        net = torch.nn.parallel.DistributedDataParallel(net)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
    else:
        import horovod_rs.torch as hvd

        hvd.init()  # with --impl none only to know the rank and to start together
        rank, procs = hvd.rank(), hvd.size()
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
        if args.impl == "horovod_rs":
            optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=net.named_parameters())
            hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        else:
            hvd.barrier()
    lockstep = None
    if args.impl == "sync":
        lockstep = lambda loss: hvd.allreduce(loss, name="lockstep")  # noqa: E731
    elif args.impl == "pipe":
        lockstep = PipeMeeting(rank, procs, hvd.broadcast_object, hvd.barrier).meet
    steps_per_s = train(net, optimizer, args.batch, rank, args.model, lockstep)
    if args.impl == "none":
        hvd.barrier()  # the other process may still be stepping: leave together
    if rank == 0:
        print("%s,%d,%d,%.2f,%s" % (args.impl, procs, args.batch, steps_per_s, args.model), flush=True)
    if args.impl == "ddp":
        torch.distributed.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
