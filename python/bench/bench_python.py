"""make bench-python: training steps/s of a Rossmann-shaped MLP (198-1000-1000-1000-500-1) on
several processes, horovod_rs's DistributedOptimizer against torch's DistributedDataParallel
(gloo), and the floor: the same job with no communication (--impl none: each process steps its
own model, as many processes at once, so they share the cores and memory as the others do); and
the same MLP in Keras (``model.fit``), with horovod_rs's Keras DistributedOptimizer
(--impl keras) and without (--impl keras_none). Run under `horovodrs -np N` (horovod_rs, none,
keras, keras_none) or `torch.distributed.run` (ddp); rank 0 prints
`impl,procs,batch,steps_per_s,model`. ``--model mnist`` (torch only) runs Horovod's MNIST conv net
(``bench_models``') instead (batch 64): a small model, whose step is short beside the exchange's latency.
"""

import argparse
import os
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


def train(net, optimizer, batch, rank, name):
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
        loss(net(x), y).backward()
        optimizer.step()
    return steps / (time.perf_counter() - started)


def keras_steps_per_s(distributed, batch):
    """The MLP's steps/s in Keras's ``model.fit`` (one thread, as a Spark task's), the same batch
    every step as the torch rows."""
    os.environ["OMP_NUM_THREADS"] = "1"  # TensorFlow's oneDNN kernels too (Spark sets it for a task)
    import tensorflow as tf

    import horovod_rs.tensorflow as hvd_tf
    import horovod_rs.tensorflow.keras as hvd

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    keras = tf.keras
    layers = [keras.Input((198,))] + [keras.layers.Dense(units, activation="relu") for units in WIDTHS]
    net = keras.Sequential(layers + [keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(1e-4)
    net.compile(hvd.DistributedOptimizer(optimizer) if distributed else optimizer, loss="mae")
    g = tf.random.Generator.from_seed(hvd.rank())
    data = tf.data.Dataset.from_tensors((g.normal([batch, 198]), g.normal([batch, 1]))).repeat()
    # Without tf.data's autotuning (as the KerasEstimator's pipelines): with it, both rows' steps
    # fell on a few fixed rates run to run (19.6, 39.3, 55.3 steps/s), whatever the exchange.
    options = tf.data.Options()
    options.autotune.enabled = False
    data = data.with_options(options)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if distributed else []
    net.fit(data, epochs=1, steps_per_epoch=WARMUP, verbose=0, shuffle=False, callbacks=callbacks)
    hvd_tf.barrier()
    started = time.perf_counter()
    net.fit(data, epochs=1, steps_per_epoch=STEPS, verbose=0, shuffle=False)
    steps_per_s = STEPS / (time.perf_counter() - started)
    hvd_tf.barrier()  # (without an exchange the other process may still be stepping)
    return hvd.rank(), hvd.size(), steps_per_s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["horovod_rs", "ddp", "none", "keras", "keras_none"], required=True)
    parser.add_argument("--batch", type=int, help="default 256 (mlp), 64 (mnist)")
    parser.add_argument("--model", choices=["mlp", "mnist"], default="mlp")
    args = parser.parse_args()
    if args.batch is None:
        args.batch = 64 if args.model == "mnist" else 256
    if args.impl.startswith("keras"):
        if args.model != "mlp":
            parser.error("the Keras rows run the MLP only")
        rank, procs, steps_per_s = keras_steps_per_s(args.impl == "keras", args.batch)
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
    steps_per_s = train(net, optimizer, args.batch, rank, args.model)
    if args.impl == "none":
        hvd.barrier()  # the other process may still be stepping: leave together
    if rank == 0:
        print("%s,%d,%d,%.2f,%s" % (args.impl, procs, args.batch, steps_per_s, args.model), flush=True)
    if args.impl == "ddp":
        torch.distributed.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
