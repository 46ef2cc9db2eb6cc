"""What every estimator's ranks do around their framework's training: the typed settings a fit
sends them (``TrainingSettings``, one subclass per framework), loading their share of the rows
(Arrow batches from Spark, or Parquet from the store), splitting off the validation rows, agreeing
on the totals and lending rows to ranks that have none (a DataFrame with fewer partitions or rows
than ranks still trains), the steps and batch streams of an epoch, and the run's local directory
and checkpoints, and stopping after an epoch when the driver asks (``RankFit``). ``run_rank`` is
the one rank runner: each framework gives only a ``Framework`` (its start-up and its fit).
Framework-neutral: the collectives run on numpy through the engine.
"""

import contextlib
import dataclasses
import functools
import math
import os
import tempfile
import typing

import numpy as np

from horovod_rs.common import arrays
from horovod_rs.spark.common import output
from horovod_rs.spark.common.checkpoint import RunWriter
from horovod_rs.spark.common.columns import ColumnError, numpy_float
from horovod_rs.spark.common.data import RankData, memory_budget
from horovod_rs.spark.common.progress import RankEvents
from horovod_rs.spark.common.timings import RankTimer

# The column that marks validation rows when ``validation`` is a fraction (drawn on the driver).
VALIDATION_COLUMN = "__horovod_rs_validation"


class DataSpec:
    """Which columns a rank trains on (built on the driver, shipped to the ranks)."""

    def __init__(self, feature_cols, label_cols, sample_weight_col=None, validation_col=None,
                 transformation_fn=None, float_type="float"):
        self.feature_cols, self.label_cols = list(feature_cols), list(label_cols)
        self.sample_weight_col, self.validation_col = sample_weight_col, validation_col
        self.transformation_fn = transformation_fn
        # ML vectors that arrive as Spark's struct are decoded to this type (columns.to_numpy).
        self.vector_dtype = numpy_float(float_type)

    @property
    def columns(self):
        """The columns a batch carries into training."""
        extra = [self.sample_weight_col] if self.sample_weight_col else []
        return list(dict.fromkeys(self.feature_cols + self.label_cols + extra))


@dataclasses.dataclass
class TrainingSettings:
    """What every framework's ranks take from the estimator's shared params (built on the driver,
    shipped to the ranks); each framework's subclass adds its own fields."""

    data: DataSpec
    batch_size: int
    val_batch_size: typing.Optional[int]
    epochs: int
    train_steps_per_epoch: typing.Optional[int]
    validation_steps_per_epoch: typing.Optional[int]
    shuffle: bool
    shuffle_buffer_size: typing.Optional[int]
    random_seed: typing.Optional[int]
    verbose: int
    use_gpu: bool
    # The store's paths and functions for the ranks (``Store.to_remote``), or None.
    store: typing.Any
    # ``(state, checkpoint bytes)`` of the run to resume, or None for a new run.
    resume: typing.Any


class Framework:
    """What a framework gives the rank runner: how an epoch's steps round (Horovod's: Keras
    ``ceil``, Torch and Lightning ``floor``), its checkpoint files' extension, ``start`` (before
    the rows load: threads, seeds, the model; returns the framework's ``hvd`` module and anything
    ``fit`` needs) and ``fit`` (the training, rank 0 returning what the estimator's
    ``_create_model`` takes)."""

    train_rounding = "floor"
    val_rounding = "ceil"
    checkpoint_extension = ""

    def start(self, settings, rank):
        raise NotImplementedError()

    def fit(self, run, started):
        raise NotImplementedError()


def trainer(framework, settings):
    """``train(rank, batches)`` for the ranks, running ``framework`` with ``settings``."""
    return functools.partial(run_rank, framework, settings)


def run_rank(framework, settings, rank, batches):
    """One rank's fit: the framework starts, the rank's rows load, then the framework fits within
    the run's local directory; rank 0 sends its phases (``timings``) last."""
    if rank == 0 and settings.store is not None and settings.store.saving_runs:
        # Rank 0 writes the checkpoints: a store its executor cannot reach fails now, not after an epoch.
        try:
            settings.store.check_writable()
        except ValueError as e:
            raise ValueError("rank 0's executor cannot write to the store: %s" % e) from None
    timer = RankTimer()
    timer.lap("join")
    hvd, started = framework.start(settings, rank)
    timer.lap("framework")
    share = load_share(batches, settings.data, hvd.local_size(), lend_rows=settings.batch_size)
    timer.lap("data")
    try:
        run = RankFit(framework, settings, rank, hvd.size(), share, timer)
        result = framework.fit(run, started)
        if run.regrown:
            result = Regrow() if rank == 0 else None
        timer.lap("finish")
        run.events.timings(timer.report())
        return result
    finally:
        share.close()


class Regrow:
    """Rank 0's result of an attempt that stopped after an epoch's checkpoint to run again on more
    ranks (``RankFit.regrow_after``); the next attempt resumes from that checkpoint."""


@dataclasses.dataclass
class InMemoryRows:
    """A split's rows in memory and how its stream batches them: endless, passes back to back,
    batches of exactly ``batch_size`` rows, each pass reshuffled when ``shuffle``."""

    arrays: dict
    batch_size: int
    shuffle: bool
    seed: typing.Optional[int]

    @classmethod
    def of(cls, data, batch_size, shuffle, seed):
        return cls(data.arrays, batch_size, shuffle, seed) if data.arrays is not None else None


class RankFit:
    """One rank's fit as every framework runs it: its share of the rows, the steps of an epoch,
    the batch streams, the run's local directory (synced to the store by rank 0), rank 0's
    checkpoint writer, its events for the driver (``events``: start, steps, epochs) and its phases
    (``timer``: the framework laps ``setup``, ``train``, ``validation`` and ``checkpoint``)."""

    def __init__(self, framework, settings, rank, size, share, timer):
        s = settings
        self.settings, self.rank, self.size, self.share, self.timer = s, rank, size, share, timer
        # Whether the driver may ask this attempt to stop after an epoch (it does only for a run
        # the store keeps), and whether it did.
        self._regrowable = output.may_ask(output.REGROW)
        self.regrown = False
        self.verbose = s.verbose if rank == 0 else 0
        self.val_batch_size = s.val_batch_size or s.batch_size
        self.steps = s.train_steps_per_epoch or steps(share.train_rows, s.batch_size, size, framework.train_rounding)
        self.val_steps = (s.validation_steps_per_epoch or
                          steps(share.val_rows, self.val_batch_size, size, framework.val_rounding)) \
            if share.val is not None else 0
        self._seed = None if s.random_seed is None else s.random_seed + rank
        self.events = RankEvents(rank == 0)
        self._extension = framework.checkpoint_extension

    def regrow_after(self, epochs_done):
        """Every rank, at the end of an epoch, after its checkpoint: whether to stop here because
        the driver asked (the cluster has slots for more ranks again; the fit runs again on them
        from this checkpoint). The ranks answer alike: rank 0's view is broadcast."""
        if not self._regrowable or epochs_done >= self.settings.epochs:
            return False
        asked = self.rank == 0 and output.asked(output.REGROW)
        if not arrays.broadcast_object(asked, root_rank=0, name="horovod_rs.regrow"):
            return False
        self.regrown = True
        return True

    @property
    def saving(self):
        """Whether the run is written to the store (checkpoints, logs)."""
        return self.settings.store is not None and self.settings.store.saving_runs

    def train_stream(self):
        """An endless stream of this rank's training batches, reshuffled every pass."""
        s = self.settings
        return self.share.train.stream(s.batch_size, s.shuffle, self._seed, s.shuffle_buffer_size)

    def val_stream(self):
        """An endless stream of this rank's validation batches in order, or None without validation."""
        return self.share.val.stream(self.val_batch_size, shuffle=False) if self.share.val is not None else None

    def train_rows(self):
        """The training rows as ``train_stream`` batches them, for a framework that batches rows held
        in memory itself (``InMemoryRows``); None when they were spilled to disk."""
        s = self.settings
        return InMemoryRows.of(self.share.train, s.batch_size, s.shuffle, self._seed)

    def val_rows(self):
        """The validation rows as ``val_stream`` batches them (``InMemoryRows``); None when spilled
        or without validation."""
        return InMemoryRows.of(self.share.val, self.val_batch_size, False, None) if self.share.val is not None \
            else None

    @contextlib.contextmanager
    def run_dir(self):
        """The run's local directory for the block (rank 0's is synced to the store)."""
        store = self.settings.store
        if store is not None:
            with store.get_local_output_dir() as directory:
                yield directory
        else:
            with tempfile.TemporaryDirectory(prefix="horovod_rs-run-") as directory:
                yield directory

    def logs_dir(self, run_dir):
        """Where TensorBoard's event files go in the run's directory."""
        store = self.settings.store
        return os.path.join(run_dir, store.logs_subdir if store is not None else "logs")

    def writer(self, run_dir):
        """Rank 0's checkpoint writer in ``run_dir`` (syncing to the store when it saves runs); None
        on the other ranks."""
        if self.rank != 0:
            return None
        return RunWriter(run_dir, self.settings.store.sync if self.saving else None, self._extension)

    def describe(self):
        """Rank 0's summary line of the fit's data and steps."""
        s, share = self.settings, self.share
        return "horovod_rs: %d ranks, %d training rows (%d steps of %d per rank and epoch)%s" % (
            self.size, share.train_rows, self.steps, s.batch_size,
            ", %d validation rows (%d steps of %d)" % (share.val_rows, self.val_steps, self.val_batch_size)
            if self.val_steps else "")


class RankShare:
    """A rank's training and validation rows, and the totals over all ranks."""

    def __init__(self, train, val, train_rows, val_rows):
        self.train, self.val = train, val
        self.train_rows, self.val_rows = train_rows, val_rows

    def close(self):
        self.train.close()
        if self.val is not None:
            self.val.close()


def load_share(batches, spec, local_size, lend_rows):
    """Reads ``batches`` (Arrow record batches) into this rank's share, then agrees with the other
    ranks: every rank ends with at least one training row (and validation row, when there is
    validation) or the job fails with a message saying there are none at all."""
    import pyarrow.compute as pc

    budget = memory_budget(local_size)
    has_validation = spec.validation_col is not None
    train = RankData(spec.columns, budget if not has_validation else budget * 3 // 4, spec.vector_dtype)
    val = RankData(spec.columns, budget // 4, spec.vector_dtype) if has_validation else None
    for batch in batches:
        if spec.transformation_fn is not None:
            batch = _transformed(batch, spec.transformation_fn)
        if not has_validation:
            train.add(batch)
            continue
        mask = _validation_mask(batch.column(spec.validation_col), spec.validation_col)
        val.add(batch.filter(mask))
        train.add(batch.filter(pc.invert(mask)))
    train.finish()
    if val is not None:
        val.finish()
    # Every rank's row counts and nulls: the totals are the whole DataFrame's, not one rank's share.
    shares = arrays.allgather_object(_share_summary(train, val), name="horovod_rs.data.rows")
    _refuse_nulls(shares)
    counts = np.array([share["rows"] for share in shares], dtype=np.int64)
    train_rows, val_rows = int(counts[:, 0].sum()), int(counts[:, 1].sum())
    if train_rows == 0:
        raise ValueError("the DataFrame has no training rows%s" % (" (every row is a validation row)"
                                                                  if val_rows else ""))
    if has_validation and val_rows == 0:
        raise ValueError("validation selects no rows: column '%s' is false or zero on every row"
                         % spec.validation_col if spec.validation_col != VALIDATION_COLUMN
                         else "the validation fraction selected no rows; raise it or drop validation")
    _lend(train, counts[:, 0], lend_rows, "train")
    if val is not None:
        _lend(val, counts[:, 1], lend_rows, "val")
    return RankShare(train, val, train_rows, val_rows)


def _share_summary(train, val):
    nulls = dict(train.nulls)
    for column, count in (val.nulls if val is not None else {}).items():
        nulls[column] = nulls.get(column, 0) + count
    return {"rows": [train.rows, val.rows if val is not None else 0], "nulls": nulls}


def _refuse_nulls(shares):
    """Fails (on every rank alike) when some rank found nulls, counting them over every rank."""
    totals = {}
    for share in shares:
        for column, count in share["nulls"].items():
            totals[column] = totals.get(column, 0) + count
    if totals:
        rows = sum(sum(share["rows"]) for share in shares)
        column = sorted(totals)[0]
        raise ColumnError("column '%s' has %d null value%s (of %d rows): drop or fill them first "
                          "(DataFrame.na.drop / na.fill)" % (column, totals[column], "s" if totals[column] > 1 else "",
                                                             rows))


def _lend(data, counts, rows, split):
    """Ranks with rows lend up to ``rows`` of them to ranks with none (only when some have none)."""
    if counts.min() > 0:
        return
    import pyarrow as pa

    offer = _ipc_bytes(data.take(rows)) if data.rows else b""
    offers = arrays.allgather_object(offer, name="horovod_rs.data.lend." + split)
    if data.rows == 0:
        tables = [pa.ipc.open_stream(o).read_all() for o in offers if o]
        data.adopt(pa.concat_tables(tables))


def _ipc_bytes(table):
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _validation_mask(column, name):
    """True on validation rows: a boolean column as is, a numeric one where non-zero."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count:
        raise ValueError("validation column '%s' has %d null values" % (name, column.null_count))
    if pa.types.is_boolean(column.type):
        return column
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        return pc.not_equal(column, 0)
    raise ValueError("validation column '%s' has type %s: it must be boolean or numeric (non-zero: validation)"
                     % (name, column.type))


def _transformed(batch, fn):
    """``transformation_fn`` on one batch of rows, as a pandas DataFrame."""
    import pyarrow as pa

    result = fn(batch.to_pandas())
    return pa.RecordBatch.from_pandas(result, preserve_index=False)


def steps(rows, batch_size, size, rounding):
    """Steps per epoch for ``rows`` rows over ``size`` ranks: ``ceil`` (Keras) or ``floor`` (Torch,
    at least one)."""
    per_rank = rows / batch_size / size
    return int(math.ceil(per_rank)) if rounding == "ceil" else max(1, int(math.floor(per_rank)))


def received(what, load):
    """``load()`` (unpickling something the user gave the estimator), with a message naming
    ``what`` when the executors cannot load it (typically: defined in a module they lack)."""
    try:
        return load()
    except Exception as e:
        raise ValueError("%s could not be loaded on the executors (%s: %s); what the estimator gets must be "
                         "defined in the driver's script or in a module the executors can import (ship it with "
                         "--py-files or SparkContext.addPyFile)" % (what, type(e).__name__, e)) from e
