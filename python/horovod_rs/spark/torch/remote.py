"""What each rank of a TorchEstimator fit runs: load its share of the rows, rebuild the model and
optimizer, and train epoch by epoch with horovod_rs's DistributedOptimizer on endless batch
streams (the same steps per epoch on every rank). Rank 0 checkpoints every epoch to the store
(model and optimizer state, the history so far) and writes TensorBoard scalars when the
``tensorboard`` package is there; it returns the history and the final state.

As Horovod's: every feature, label and weight reaches the model as float32 (reshaped by
``input_shapes``); the learning rate is multiplied by the number of ranks for training and divided
back in every checkpoint and in the returned optimizer state; the initial state is rank 0's
(broadcast); loss and metrics are averaged over the ranks at every step. The helper factories keep
Horovod's names (``_train_minibatch_fn``, ``_metric_cls``, ``_calculate_loss_fn``, ...).
"""

import dataclasses
import datetime
import inspect
import io
import typing

import cloudpickle

from horovod_rs.spark.common import remote as common
from horovod_rs.spark.common.constants import CUSTOM_SPARSE, METRIC_PRINT_FREQUENCY
from horovod_rs.spark.torch import device as devices
from horovod_rs.spark.torch import util


def make_trainer(settings):
    """``train(rank, batches)`` for the ranks of a fit with ``settings`` (``TorchSettings``)."""
    return common.trainer(Torch(), settings)


@dataclasses.dataclass
class TorchSettings(common.TrainingSettings):
    """A TorchEstimator fit's settings: the shared ones and PyTorch's (serialized on the driver)."""

    model: bytes
    optimizer_cls: bytes
    optimizer_state: bytes
    parameter_order: list
    loss: bytes
    loss_constructors: bytes
    loss_weights: typing.Optional[list]
    metrics: bytes
    train_minibatch_fn: bytes
    gradient_compression: typing.Optional[bytes]
    input_shapes: typing.Optional[list]
    label_shapes: typing.Optional[list]
    backward_passes_per_step: int


class Torch(common.Framework):
    """PyTorch on the rank runner: Horovod's steps (``floor``, validation ``ceil``) and training
    loop with horovod_rs's DistributedOptimizer."""

    checkpoint_extension = ".pt"

    def start(self, s, rank):
        import torch

        import horovod_rs.torch as hvd

        devices.limit_threads()
        if s.random_seed is not None:
            torch.manual_seed(s.random_seed)
        device = devices.training_device(hvd, s.use_gpu, s.verbose if rank == 0 else 0)
        return hvd, (hvd, torch, device)

    def fit(self, run, started):
        hvd, torch, device = started
        return _fit(run, hvd, torch, device)


def _fit(run, hvd, torch, device):
    s, rank, size, verbose, share = run.settings, run.rank, run.size, run.verbose, run.share
    spec = s.data
    model = util.deserialize_model(s.model).to(device)
    labels_count = len(spec.label_cols)
    loss_fns = util.to_list(cloudpickle.loads(s.loss), labels_count)
    constructors = util.to_list(cloudpickle.loads(s.loss_constructors), labels_count)
    if constructors:
        context = {"model": model, "hvd": hvd, "torch": torch, "rank": rank, "size": size,
                   "train_rows": share.train_rows, "val_rows": share.val_rows}
        loss_fns = [constructor(**context) for constructor in constructors]
    if spec.sample_weight_col:
        _check_per_sample(loss_fns)
    loss_weights = s.loss_weights or [1.0 / labels_count] * labels_count
    metric_fn_groups = cloudpickle.loads(s.metrics) or []

    optimizer_cls = cloudpickle.loads(s.optimizer_cls)
    epochs_done, history, state = 0, [], torch.load(io.BytesIO(s.optimizer_state), weights_only=False)
    if s.resume is not None:
        run_state, data = s.resume
        checkpoint = torch.load(io.BytesIO(data), map_location=device, weights_only=False)
        model.load_state_dict(checkpoint["model"])
        state, epochs_done, history = checkpoint["optimizer"], run_state["epochs_done"], run_state["history"]
    _scale_lr(state, size)  # checkpoints and the user's optimizer hold the unscaled rate
    optimizer = util.rebuild_optimizer(optimizer_cls, state, s.parameter_order, model)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    distributed_args = {"named_parameters": model.named_parameters(),
                        "backward_passes_per_step": s.backward_passes_per_step}
    if s.gradient_compression is not None:
        distributed_args["compression"] = cloudpickle.loads(s.gradient_compression)
    optimizer = hvd.DistributedOptimizer(optimizer, **distributed_args)
    optimizer.load_state_dict(state)  # the wrapper starts without the moments
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    train_stream, val_stream = run.train_stream(), run.val_stream()
    to_tensors = _batch_fn(spec, s.input_shapes, device)
    transform_outputs = _transform_outputs_fn(s.label_shapes)
    calculate_loss = _calculate_loss_fn()

    def loss_fn(outputs, labels, sample_weights):
        return calculate_loss(outputs, labels, loss_weights, loss_fns, sample_weights)

    train_minibatch = _minibatch_caller(cloudpickle.loads(s.train_minibatch_fn) or _train_minibatch_fn())
    metric_cls = _metric_cls()
    construct_holders = _construct_metric_value_holders_fn()
    update_metrics = _update_metrics_fn(metric_fn_groups)
    get_metric_avgs = _get_metric_avgs_fn()
    write_summary = _write_metrics_summary_fn()

    with run.run_dir() as run_dir:
        log_writer = _summary_writer(run.logs_dir(run_dir), verbose) if rank == 0 and run.saving else None
        writer = run.writer(run_dir)

        def aggregate(stage, epoch, loss, holders):
            values = get_metric_avgs(holders)
            write_summary(stage, epoch, loss, values, log_writer)
            return {loss.name: loss.avg.item(), "all_metrics": values}

        def run_epoch(stage, epoch, count, stream):
            loss_metric = metric_cls("loss", hvd)
            holders = construct_holders(metric_cls, metric_fn_groups, spec.label_cols, hvd)
            for batch_idx in range(count):
                inputs, labels, weights = to_tensors(next(stream))
                if stage == "train":
                    outputs, loss = train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels,
                                                    weights, s.backward_passes_per_step, batch_idx)
                    outputs, labels = transform_outputs(outputs, labels)  # metrics see labels as the loss did
                else:
                    with torch.no_grad():
                        outputs, labels = transform_outputs(model(*inputs), labels)
                        loss = loss_fn(outputs, labels, weights)
                update_metrics(holders, outputs, labels)
                loss_metric.update(loss)
                if stage == "train":
                    run.events.step(epoch, batch_idx + 1, lambda: {"train/loss": loss_metric.avg.item()})
                if verbose and batch_idx % METRIC_PRINT_FREQUENCY == 0:
                    print("%s\tepoch:\t%d\tstep\t%d:\t%s" % (stage, epoch, batch_idx,
                                                             {loss_metric.name: loss_metric.avg.item(),
                                                              "all_metrics": get_metric_avgs(holders)}))
            return aggregate(stage, epoch, loss_metric, holders)

        if verbose:
            print(run.describe())
        run.events.start(s.epochs, epochs_done, run.steps, run.val_steps)
        run.timer.lap("setup")
        for epoch in range(epochs_done, s.epochs):
            model.train()
            metrics = {"epoch": epoch, "train": run_epoch("train", epoch, run.steps, train_stream)}
            optimizer.step()  # the epoch's last (accumulated) gradients, as Horovod's loop
            run.timer.lap("train")
            if val_stream is not None:
                model.eval()
                metrics["validation"] = run_epoch("validation", epoch, run.val_steps, val_stream)
                run.timer.lap("validation")
            history.append(metrics)
            run.events.epoch(epoch, epoch_metrics(metrics))
            if verbose:
                print(datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%b-%d %H:%M:%S UTC"), metrics)
            if writer is not None:
                torch.save({"model": model.state_dict(), "optimizer": _unscaled_state(optimizer, size)},
                           writer.next_path())
                if log_writer is not None:
                    log_writer.flush()
                writer.commit(epoch + 1, history)
            run.timer.lap("checkpoint")
            if run.regrow_after(epoch + 1):
                break
        if log_writer is not None:
            log_writer.close()
        if rank != 0 or run.regrown:
            return None
        buffer = io.BytesIO()
        torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                    "optimizer": _unscaled_state(optimizer, size)}, buffer)
        return {"history": history, "checkpoint": buffer.getvalue()}


def epoch_metrics(entry):
    """An epoch's history entry as flat metrics: ``train/loss``, ``validation/<metric>``, ... (the
    names of its TensorBoard scalars, without the group index)."""
    flat = {}
    for stage in ("train", "validation"):
        values = entry.get(stage)
        if not values:
            continue
        for name, value in values.items():
            if name == "all_metrics":
                for group in value:
                    flat.update(("%s/%s" % (stage, metric), v) for metric, v in group.items())
            else:
                flat["%s/%s" % (stage, name)] = value
    return flat


def _scale_lr(state, factor):
    for group in state["param_groups"]:
        if "lr" in group:
            group["lr"] = group["lr"] * factor


def _unscaled_state(optimizer, size):
    state = optimizer.state_dict()
    _scale_lr(state, 1.0 / size)
    return state


def _batch_fn(spec, input_shapes, device):
    """A function turning one batch (``{column: array}``) into ``(inputs, labels, weights)`` float32
    tensors on ``device``, each input reshaped to its ``input_shapes`` entry."""
    import torch

    shapes = list(input_shapes) if input_shapes else [None] * len(spec.feature_cols)
    if len(shapes) != len(spec.feature_cols):
        raise ValueError("input_shapes has %d shapes for %d feature columns (%s)"
                         % (len(shapes), len(spec.feature_cols), spec.feature_cols))

    def tensor(values):
        return torch.tensor(values, dtype=torch.float32, device=device)

    def to_tensors(batch):
        inputs = [shaped(tensor(batch[c]), shape, c) for c, shape in zip(spec.feature_cols, shapes)]
        labels = [tensor(batch[c]) for c in spec.label_cols]
        weights = tensor(batch[spec.sample_weight_col]).reshape(-1) if spec.sample_weight_col else None
        return inputs, labels, weights

    return to_tensors


def shaped(values, shape, column, rows_first=False):
    """``values`` (a batch of one column) in an ``input_shapes`` entry's shape: Horovod's
    ``reshape(shape)`` for a whole-batch shape (``[-1, 1, 28, 28]``), or rows first for a per-row
    shape (``[1, 28, 28]``); an error naming the column when neither fits. ``rows_first``: a shape
    without -1 is a row's (prediction, where Horovod reshapes each row), even for a batch of one
    row, whose outputs then keep their row dimension."""
    if shape is None:
        return values
    shape = [int(d) for d in shape]
    total, rows = values.numel(), values.shape[0]
    known = 1
    for d in shape:
        known *= d if d != -1 else 1
    if (-1 in shape and known and total % known == 0) or (-1 not in shape and known == total and not rows_first):
        return values.reshape(shape)
    if -1 not in shape and rows and known * rows == total:
        return values.reshape([rows] + shape)
    raise ValueError("column '%s' has %d values per row, which do not fit input shape %s"
                     % (column, total // max(rows, 1), shape))


def _transform_outputs_fn(label_shapes):
    def transform_outputs(outputs, labels):
        if not isinstance(outputs, (tuple, list)):
            outputs = [outputs]
        if hasattr(outputs[0], "shape"):
            if label_shapes:
                labels = [label.reshape(shape) for label, shape in zip(labels, label_shapes)]
            else:  # a label as its output's shape when they hold as many values
                labels = [label.reshape(output.shape) if output.shape.numel() == label.shape.numel() else label
                          for label, output in zip(labels, outputs)]
        return outputs, labels

    return transform_outputs


def _check_per_sample(loss_fns):
    """With ``sample_weight_col`` each loss must give per-row values (``reduction='none'``)."""
    import torch

    for fn in loss_fns:
        if isinstance(fn, torch.nn.Module):
            if not hasattr(fn, "reduction"):
                raise ValueError("sample_weight_col needs per-row losses, but loss %s has no 'reduction' attribute"
                                 % type(fn).__name__)
            continue
        try:
            parameters = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        if "reduction" not in parameters and not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
            raise ValueError("sample_weight_col needs per-row losses: loss %s must take reduction='none' "
                             "(as torch.nn.functional's losses do)" % getattr(fn, "__name__", fn))


def _per_sample_loss(fn, output, label):
    import torch

    if isinstance(fn, torch.nn.Module) and hasattr(fn, "reduction"):
        saved, fn.reduction = fn.reduction, "none"
        try:
            return fn(output, label)
        finally:
            fn.reduction = saved
    return fn(output, label, reduction="none")


def _calculate_loss_fn():
    def calculate_loss(outputs, labels, loss_weights, loss_fns, sample_weights=None):
        if sample_weights is None:
            losses = [fn(output, label) * weight
                      for output, label, fn, weight in zip(outputs, labels, loss_fns, loss_weights)]
        else:
            # Each row's loss times its weight, averaged over the batch (not divided by the sum of
            # the weights, so equal weights in different batches count the same, as Horovod's).
            losses = [(_per_sample_loss(fn, output, label).flatten() * sample_weights).mean() * weight
                      for output, label, fn, weight in zip(outputs, labels, loss_fns, loss_weights)]
        return sum(losses)

    return calculate_loss


def _train_minibatch_fn():
    def train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights,
                        backward_passes_per_step, batch_idx):
        if batch_idx % backward_passes_per_step == 0:
            if batch_idx != 0:
                optimizer.step()
            optimizer.zero_grad()
        outputs = model(*inputs)
        outputs, labels = transform_outputs(outputs, labels)
        loss = loss_fn(outputs, labels, sample_weights)
        if backward_passes_per_step > 1:
            loss = loss / float(backward_passes_per_step)
        loss.backward()
        return outputs, loss

    return train_minibatch


def _minibatch_caller(fn):
    """The user's ``train_minibatch_fn`` called with the arguments it takes: Horovod's nine, or the
    first seven of older versions."""
    try:
        parameters = inspect.signature(fn).parameters.values()
        takes_all = any(p.kind == p.VAR_POSITIONAL for p in parameters) or len(parameters) >= 9
    except (TypeError, ValueError):
        takes_all = True
    if takes_all:
        return fn
    return lambda *args: fn(*args[:7])


def _get_optimizer_with_unscaled_lr_fn():
    def get_optimizer_with_unscaled_lr(hvd, current_optimizer, optimizer_cls, model):
        state = current_optimizer.state_dict()
        _scale_lr(state, 1.0 / hvd.size())
        return util.rebuild_optimizer(optimizer_cls, state, util.parameter_order(current_optimizer, model), model)

    return get_optimizer_with_unscaled_lr


def _metric_cls():
    import torch

    class Metric:
        """A value averaged over the ranks at every update, then over the updates."""

        def __init__(self, name, hvd):
            self.name, self.hvd = name, hvd
            self.sum, self.n = torch.tensor(0.0), torch.tensor(0.0)

        def update(self, val):
            self.sum += self.hvd.allreduce(torch.as_tensor(val).detach().float().cpu(), name=self.name)
            self.n += 1

        @property
        def avg(self):
            return self.sum / self.n

    return Metric


def _construct_metric_value_holders_fn():
    def construct_metric_value_holders(metric_class, metric_fn_groups, label_columns, hvd):
        return [[metric_class("group_%d_%s" % (number, label), hvd) for label in label_columns]
                for number, _ in enumerate(metric_fn_groups)]

    return construct_metric_value_holders


def _get_metric_avgs_fn():
    def get_metric_avgs(metric_value_groups):
        return [{metric.name: metric.avg.item() for metric in group} for group in metric_value_groups]

    return get_metric_avgs


def _update_metrics_fn(metric_fn_groups):
    def update_metrics(metric_value_groups, outputs, labels):
        """A group of one function measures every output with it; a longer group has one function
        per output."""
        for fn_group, value_group in zip(metric_fn_groups, metric_value_groups):
            fns = [fn_group[0]] * len(outputs) if len(fn_group) == 1 else fn_group
            for value, fn, output, label in zip(value_group, fns, outputs, labels):
                value.update(fn(output, label))
        return metric_value_groups

    return update_metrics


def _custom_sparse_to_dense(torch, rows, width):
    """Rows of Horovod's custom sparse format (``to_petastorm_fn``) as a dense ``[rows, width]``."""
    dense = torch.zeros([rows.shape[0], width])
    for r in range(rows.shape[0]):
        count = int(rows[r][0])
        dense[r][rows[r][1:count + 1].long()] = rows[r][count + 1:2 * count + 1].to(dense.dtype)
    return dense


def _prepare_np_data_fn():
    """Horovod's decoder of a column's rows as its Petastorm path read them: rows of its custom
    sparse format become dense (``metadata[col]['shape']`` wide), others are returned as they
    are. The Arrow path sends sparse vectors dense; this is for code that made the format."""

    def prepare_np_data(rows, col_name, metadata):
        import torch

        if metadata[col_name]["intermediate_format"] != CUSTOM_SPARSE:
            return rows
        return _custom_sparse_to_dense(torch, rows, metadata[col_name]["shape"])

    return prepare_np_data


def _write_metrics_summary_fn():
    def write_metrics_summary(stage, epoch, loss_metric, metric_value_groups, log_writer):
        if not log_writer:
            return
        log_writer.add_scalar("%s/%s" % (stage, loss_metric.name), loss_metric.avg.item(), epoch)
        for index, group in enumerate(metric_value_groups):
            for name, value in group.items():
                log_writer.add_scalar("%s/%s:%d" % (stage, name, index), value, epoch)

    return write_metrics_summary


def _summary_writer(logs_dir, verbose):
    """TensorBoard's event file for rank 0's metrics, or None without the tensorboard package."""
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        if verbose:
            print("horovod_rs: no TensorBoard logs in the store (pip install tensorboard to have them)")
        return None
    from horovod_rs.spark.common.scalar_log import ScalarLog

    return ScalarLog(logs_dir)
