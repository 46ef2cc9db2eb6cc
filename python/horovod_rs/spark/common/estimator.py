"""The estimator and model every framework shares: what ``fit`` does on the driver, how the data
reaches the ranks, how ``transform`` predicts in the executors, and how models are saved.

``fit(df)``: checks the params and columns on the driver (a missing column or a model that does
not match the feature columns fails before any job), selects the columns the model needs
(vectors as float arrays), and runs the framework's training function on every rank over the
rank's partition as Arrow batches (``SparkBackend.run_on_dataframe``). A custom ``Backend`` gets
the data through Parquet in the store (``prepare_data``), as Horovod's does. Rank 0's result
becomes the framework's Model.

``transform(df)``: one pass of ``mapInArrow``: each task loads the model once (and keeps it while
its Python worker lives), predicts batch by batch, and appends one column per model output
(a vector for outputs wider than one value).
"""

import hashlib
import secrets
import time

import cloudpickle
import numpy as np
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable

from horovod_rs.spark.common import serialization, util
from horovod_rs.spark.common.backend import SparkBackend
from horovod_rs.spark.common.columns import (info_of_metadata, numpy_float, plan_columns, sending_vectors,
                                              spark_output_type, to_numpy, vector_arrow_type, vectors_to_arrow)
from horovod_rs.spark.common.params import EstimatorParams, ModelParams
from horovod_rs.spark.common.remote import VALIDATION_COLUMN, DataSpec

# Rows a transform task predicts at once.
PREDICT_BATCH_ROWS = 4096


class HorovodEstimator(Estimator, EstimatorParams, MLWritable, MLReadable):
    """Fits a model on a DataFrame across Spark executors (framework-specific subclasses)."""

    # -- what a framework provides -------------------------------------------------------------
    run_id_prefix = "horovod"
    float_type = "float"  # how floating columns reach the ranks ("double" for float64 models)

    def _check_model(self):
        """Raises when the model, loss or optimizer cannot train on the columns (driver side)."""

    def _remote_trainer(self, run_id, data_spec, resume):
        """A picklable ``train(rank, batches)`` run on every rank (``remote.trainer`` of the
        framework and its settings); rank 0 returns what ``_create_model`` takes."""
        raise NotImplementedError()

    def _shared_settings(self, run_id, data_spec, resume):
        """The fields of ``remote.TrainingSettings`` every framework takes from the shared params."""
        store = self.getStore()
        return dict(
            data=data_spec,
            batch_size=self.getBatchSize(),
            val_batch_size=self.getValBatchSize(),
            epochs=self.getEpochs(),
            train_steps_per_epoch=self.getTrainStepsPerEpoch(),
            validation_steps_per_epoch=self.getValidationStepsPerEpoch(),
            shuffle=self.getShuffle() and self.getShufflingBufferSize() != 0,
            shuffle_buffer_size=self.getShufflingBufferSize(),
            random_seed=self.getRandomSeed(),
            verbose=self.getVerbose(),
            use_gpu=self.getUseGpu(),
            store=store.to_remote(run_id, None) if store is not None else None,
            resume=resume,
        )

    def _load_checkpoint(self, run_id):
        """What the framework needs to resume ``run_id`` from the store (None: start afresh); Horovod's
        name, which its tests watch."""
        from horovod_rs.spark.common.checkpoint import read_state

        return read_state(self.getStore(), run_id)

    def _create_model(self, result, run_id, infos):
        raise NotImplementedError()

    def _backend_env(self):
        """Environment variables the ranks get while they train."""
        return {}

    def _mlflow_model(self, model):
        """``(flavor, save_model's keyword arguments)`` that log ``model`` (the framework's model, as
        ``getModel`` of the estimator or of the fitted Model) to MLflow."""
        raise NotImplementedError()

    # -- Horovod's Estimator API ---------------------------------------------------------------
    def fit(self, df, params=None):
        """Trains on ``df``; returns the framework's Model (a Spark ML Transformer)."""
        return super().fit(df, params)

    def fit_on_parquet(self, params=None, dataset_idx=None):
        """Trains on the Parquet data ``prepare_data`` wrote to the store (``dataset_idx``). Without
        an index: the store's own training path when it holds data (Horovod's), else the data of
        the ``prepare_data`` block this call is inside (as Horovod's documentation writes it)."""
        estimator = self.copy(params) if params else self
        return estimator._fit_on_parquet(dataset_idx)

    def _get_or_create_backend(self):
        backend = self.getBackend()
        if backend is None:
            return SparkBackend(self.getNumProc(), verbose=self.getVerbose())
        if self.getNumProc() is not None:
            raise ValueError('At most one of parameters "backend" and "num_proc" may be specified')
        return backend

    def _has_checkpoint(self, run_id):
        return self._load_checkpoint(run_id) is not None

    def _check_params(self):
        if self.getModel() is None:
            raise ValueError("Model parameter is required")
        store = self.getStore()
        if store is not None and store.saving_runs():
            store.check_writable()
        if not self.getFeatureCols():
            raise ValueError("feature_cols is required: the columns that feed the model's inputs, in order")
        if not self.getLabelCols():
            raise ValueError("label_cols is required: the columns the model's outputs learn, in order")
        util.check_validation(self.getValidation())
        weights = self.getLossWeights()
        if weights is not None and len(weights) != len(self.getLabelCols()):
            raise ValueError("loss_weights has %d values for %d label columns" % (len(weights),
                                                                                  len(self.getLabelCols())))
        if self.getBatchSize() < 1 or self.getEpochs() < 1:
            raise ValueError("batch_size and epochs must be at least 1")
        from horovod_rs.spark.common.tracking import check_mode

        check_mode(self.getMlflowTracking())
        self._check_model()

    def _data_spec(self):
        validation = self.getValidation()
        validation_col = validation if isinstance(validation, str) else \
            VALIDATION_COLUMN if validation else None
        return DataSpec(self.getFeatureCols(), self.getLabelCols(), self.getSampleWeightCol(), validation_col,
                        self.getTransformationFn(), self.float_type)

    def _fit(self, df):
        from horovod_rs.spark.common.timings import FitTimer

        timer = FitTimer()
        self._check_params()
        backend = self._get_or_create_backend()
        spec = self._data_spec()
        used = spec.columns + ([spec.validation_col] if spec.validation_col not in (None, VALIDATION_COLUMN) else [])
        # Rows that reach the ranks through Arrow take ML vectors as they are (the ranks decode them);
        # Parquet files and a transformation_fn's pandas rows keep them as arrays.
        arrow_path = hasattr(backend, "run_on_dataframe")
        vectors_as_structs = arrow_path and spec.transformation_fn is None
        expressions, infos = plan_columns(df, used, self.float_type, vectors_as_structs=vectors_as_structs)
        if spec.validation_col == VALIDATION_COLUMN:
            from pyspark.sql import functions as F

            seed = self.getRandomSeed()
            expressions.append((F.rand(seed if seed is not None else 0) < float(self.getValidation()))
                               .alias(VALIDATION_COLUMN))
        # No emptiness check here: it would compute the DataFrame once more (all of it behind a sort
        # or a randomSplit); the ranks count their rows and fail alike when there are none.
        prepared = df.select(*expressions)
        run_id, resume = self._run()
        retries = []

        def train(monitor):
            if arrow_path:
                with sending_vectors(prepared.sparkSession, infos if vectors_as_structs else {}):
                    results = self._run_on_dataframe(backend, prepared, spec, run_id, resume, retries, monitor)
            else:
                from horovod_rs.spark.common.util import prepare_data

                with prepare_data(backend.num_processes(), self.getStore(), prepared, spec.label_cols,
                                  spec.feature_cols, validation=spec.validation_col,
                                  sample_weight_col=spec.sample_weight_col,
                                  partitions_per_process=self.getPartitionsPerProcess()) as dataset_idx:
                    results = self._run_on_parquet(backend, spec, run_id, resume, dataset_idx, monitor)
            return self._create_model(results[0], run_id, infos)._set(retries=retries)

        return self._monitored(run_id, train, timer)

    def _monitored(self, run_id, train, timer):
        """``train(monitor)``'s model, with the fit's events shown (``verbose``) and tracked in
        MLflow (``mlflow_tracking``) by a ``progress.FitMonitor``, and the fit's phases
        (``timer``, a ``timings.FitTimer`` started with the fit) in its ``timings``."""
        from horovod_rs.spark.common import progress, timings, tracking

        tracker = tracking.tracker_for(self.getMlflowTracking(), run_id)
        if tracker is not None:
            tracker.log_params(tracking.loggable_params(self))
            tracker.prepare(self._mlflow_model(self.getModel())[0])
        name = "%s.fit" % type(self).__name__
        monitor = progress.FitMonitor(name, self.getVerbose(), tracker, timer=timer)
        ok = False
        try:
            model = train(monitor)
            if tracker is not None:
                flavor, arguments = self._mlflow_model(model.getModel())
                tracker.log_model(flavor, **arguments)
            ok = True
            model._set(timings=timer.result())
            if self.getVerbose():
                print("horovod_rs: " + timings.line(name, model.getTimings()), flush=True)
            return model
        finally:
            if tracker is not None:
                tracker.close(ok)

    def _run_on_dataframe(self, backend, prepared, spec, run_id, resume, retries, monitor):
        """Trains over the DataFrame; when Spark loses a rank outside the model's code (an executor
        dies), runs the job again (``spark.horovod.rs.fitAttempts`` in all), resuming from the
        store's last checkpoint, on fewer ranks if ``spark.horovod.rs.fitMinProcesses`` allows and
        the cluster has fewer slots then. An attempt on fewer ranks than ``num_proc`` stops after
        the epoch in which the slots come back, and the next one resumes on all of them.
        ``retries`` receives one entry per later attempt."""
        from horovod_rs.spark.common import remote
        from horovod_rs.spark.common.job import FIT_ATTEMPTS_KEY, JobSettings, run_attempts

        settings = JobSettings(prepared.sparkSession)
        wanted = backend.num_processes()
        state = {"resume": resume, "num_proc": wanted}
        store = self.getStore()
        can_grow = store is not None and store.saving_runs()

        def attempt(number):
            trainer = self._remote_trainer(run_id, spec, state["resume"])
            grow_to = wanted if can_grow and state["num_proc"] < wanted else None
            return backend.run_on_dataframe(trainer, prepared, env=self._backend_env(), num_proc=state["num_proc"],
                                            description="%s.fit (attempt %d)" % (type(self).__name__, number),
                                            monitor=monitor, grow_to=grow_to)

        def next_attempt(number, reason, error=None):
            # What the next attempt resumes from, read once: its trainer carries it to rank 0.
            checkpoint = state["resume"] = self._load_checkpoint(run_id)
            done = checkpoint[0]["epochs_done"] if checkpoint else 0
            state["num_proc"] = ranks_for_retry(prepared.sparkSession, wanted, settings.fit_min_processes)
            # Epochs count from 1; every epoch after `done` that the last attempt began runs again.
            retries.append({"attempt": number + 1, "reason": reason, "resumed_after_epoch": done,
                            "num_proc": state["num_proc"], "error": error})
            return checkpoint, done

        def on_retry(number, error):
            checkpoint, done = next_attempt(number, "rank lost", str(error))
            where = ("resumes run %s after epoch %d (epoch %d runs again)" % (run_id, done, done + 1)) if checkpoint \
                else "starts from scratch (no checkpoint in the store%s)" % ("" if store else ": no store")
            print("horovod_rs: attempt %d lost a rank outside the model's code; attempt %d %s on %s.\n%s"
                  % (number, number + 1, where, _ranks(state["num_proc"]), error), flush=True)

        def regrown(number, results):
            if not isinstance(results[0], remote.Regrow):
                return False
            ranks = state["num_proc"]
            _, done = next_attempt(number, "slots back")
            print("horovod_rs: the cluster has slots for %s again: attempt %d (on %s) stopped after epoch %d; "
                  "attempt %d resumes run %s on %s" % (_ranks(wanted), number, _ranks(ranks), done, number + 1, run_id,
                                                       _ranks(state["num_proc"])), flush=True)
            return True

        return run_attempts(settings.fit_attempts, attempt, on_retry, FIT_ATTEMPTS_KEY, again=regrown)

    def _run(self):
        """This fit's run id (given, or new) and what it resumes from (None: a new run)."""
        # Horovod's new id is the second alone, so two fits in one second (a CrossValidator's, on
        # small data) shared a run, and the second resumed the first's checkpoint as its own.
        run_id = self.getRunId() or "%s_%d_%s" % (self.run_id_prefix, int(time.time()), secrets.token_hex(4))
        resume = self._load_checkpoint(run_id)
        if resume is not None and self.getVerbose():
            print("horovod_rs: resuming run %s after epoch %d" % (run_id, resume[0]["epochs_done"]))
        return run_id, resume

    def _fit_on_parquet(self, dataset_idx):
        from horovod_rs.spark.common.timings import FitTimer
        from horovod_rs.spark.common.util import dataset_of_open_block, has_prepared_data, parquet_column_infos

        timer = FitTimer()
        self._check_params()
        if dataset_idx is None and self.getStore() is not None and not has_prepared_data(self.getStore(), None):
            dataset_idx = dataset_of_open_block(self.getStore())
        backend = self._get_or_create_backend()
        spec = self._data_spec()
        infos = parquet_column_infos(self.getStore(), dataset_idx, spec.columns)
        run_id, resume = self._run()

        def train(monitor):
            results = self._run_on_parquet(backend, spec, run_id, resume, dataset_idx, monitor)
            return self._create_model(results[0], run_id, infos)

        return self._monitored(run_id, train, timer)

    def _run_on_parquet(self, backend, spec, run_id, resume, dataset_idx, monitor):
        """Every rank reads its rows of the prepared Parquet data in the store, then trains."""
        import copy

        from horovod_rs.spark.common.parquet import rank_batches

        store = self.getStore()
        spec = copy.copy(spec)
        has_validation = spec.validation_col is not None or store.is_parquet_dataset(
            store.get_val_data_path(dataset_idx))
        # The validation rows come from their own files; rank_batches marks them.
        spec.validation_col = VALIDATION_COLUMN if has_validation else None
        trainer = self._remote_trainer(run_id, spec, resume)
        train_path, val_path = store.get_train_data_path(dataset_idx), store.get_val_data_path(dataset_idx)
        columns = spec.columns

        def run():
            import itertools

            from horovod_rs.common import basics

            basics.init()
            rank, size = basics.rank(), basics.size()
            batches = rank_batches(store, train_path, rank, size, columns, mark=False if has_validation else None)
            if has_validation:
                batches = itertools.chain(batches, rank_batches(store, val_path, rank, size, columns, mark=True))
            return trainer(rank, batches)

        if isinstance(backend, SparkBackend):
            return backend.run(run, env=self._backend_env(), monitor=monitor)
        return backend.run(run, env=self._backend_env())

    # -- persistence ---------------------------------------------------------------------------
    def _portable_param(self, name, value):
        """A param's value in a form cloudpickle can save (frameworks convert their objects)."""
        return value

    def _restored_param(self, name, value, saved):
        """The inverse of ``_portable_param`` (``saved``: every saved param, e.g. custom objects)."""
        return value

    def write(self):
        return serialization.ParamsWriter(self)

    @classmethod
    def read(cls):
        return serialization.ParamsReader(cls)


class HorovodModel(Model, ModelParams, MLWritable, MLReadable):
    """A trained model; ``transform`` appends one prediction column per model output."""

    float_type = "float"

    def _predictor_factory(self):
        """A picklable function returning ``predict(inputs: list of arrays) -> list of arrays``,
        called once per task in the executors."""
        raise NotImplementedError()

    def _output_widths(self, sample_inputs):
        """Values per row of each model output (default: predict a sample and look)."""
        predict = self._predictor_factory()()
        return [int(np.prod(out.shape[1:])) for out in predict(sample_inputs)]

    def transform(self, df, params=None):
        """Predicts on ``df``: output columns default to ``<label>__output`` (``setOutputCols``)."""
        return super().transform(df, params)

    def _transform(self, df):
        import pyarrow as pa
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        features = list(self.getFeatureColumns())
        labels = list(self.getLabelColumns())
        outputs = list(self.getOutputCols() or [label + "__output" for label in labels])
        infos = {name: info_of_metadata(name, entry) for name, entry in (self._get_metadata() or {}).items()}
        existing = [c for c in outputs if c in df.columns]
        if existing:
            raise ValueError("output columns %s already exist in the DataFrame; choose others with setOutputCols"
                             % existing)
        # ML vectors go as their struct, decoded as the ranks do (without vector_to_array's start-up
        # in each executor): a vector feature is read from its own column, which the batches carry
        # anyway; every other feature from a converted copy.
        expressions, feature_infos = plan_columns(df, features, self.float_type, vectors_as_structs=True)
        expression_of = dict(zip(feature_infos, expressions))
        sources = [f if feature_infos[f].is_vector else "__horovod_rs_input_%d" % i for i, f in enumerate(features)]
        frame = df.select("*", *[expression_of[f].alias(src) for src, f in zip(sources, features)
                                 if not feature_infos[f].is_vector])
        vector_dtype = numpy_float(self.float_type)
        widths = self._output_widths(_sample_inputs(frame, sources, features, vector_dtype))
        if len(widths) != len(outputs):
            raise ValueError("the model has %d outputs but %d output columns are named (%s)"
                             % (len(widths), len(outputs), outputs))
        factory = self._predictor_factory()
        digest = hashlib.sha256(cloudpickle.dumps(factory)).hexdigest()
        width_of = dict(zip(outputs, widths))
        target_of = {name: spark_output_type(width_of[name], infos.get(label))
                     for name, label in zip(outputs, labels + [None] * len(outputs))}
        vector_outputs = {name for name, target in target_of.items() if isinstance(target, type(_vector_type()))}
        fields = list(df.schema.fields) + [
            T.StructField(name, _vector_type() if name in vector_outputs else T.FloatType()) for name in outputs]
        schema = T.StructType(fields)
        passed = list(df.columns)

        def predict(batches):
            model = _cached_predictor(digest, factory)
            for batch in batches:
                for start in range(0, batch.num_rows, PREDICT_BATCH_ROWS):
                    part = batch.slice(start, PREDICT_BATCH_ROWS)
                    inputs = [to_numpy(part.column(src), f, vector_dtype) for src, f in zip(sources, features)]
                    results = model(inputs)
                    columns = [part.column(c) for c in passed]
                    for name, values in zip(outputs, results):
                        values = np.asarray(values, dtype=np.float32).reshape(part.num_rows, -1)
                        columns.append(vectors_to_arrow(values) if name in vector_outputs
                                       else pa.array(values.reshape(-1), type=pa.float32()))
                    yield pa.RecordBatch.from_arrays(columns, schema=pa.schema(
                        [part.schema.field(c) for c in passed] +
                        [pa.field(n, vector_arrow_type() if n in vector_outputs else pa.float32()) for n in outputs]))

        result = frame.mapInArrow(predict, schema)
        for name, target in target_of.items():
            if isinstance(target, T.IntegralType):
                result = result.withColumn(name, F.round(F.col(name)).cast(target))
            elif name not in vector_outputs and not isinstance(target, T.FloatType):
                result = result.withColumn(name, F.col(name).cast(target))
        return result

    _portable_param = HorovodEstimator._portable_param
    _restored_param = HorovodEstimator._restored_param

    def write(self):
        return serialization.ParamsWriter(self)

    @classmethod
    def read(cls):
        return serialization.ParamsReader(cls)


def ranks_for_retry(spark, num_proc, minimum):
    """How many ranks a fit's next attempt runs with: ``num_proc``, or, when ``minimum``
    (``spark.horovod.rs.fitMinProcesses``) is set, the task slots the cluster has now if fewer,
    but not fewer than ``minimum`` (the attempt then waits for those as any job does). A cluster
    whose slots cannot be counted (a Connect client) runs ``num_proc``."""
    from horovod_rs.spark.common import session

    if minimum is None:
        return num_proc
    slots = session.task_slots(spark)
    if slots is None:
        return num_proc
    return max(min(minimum, num_proc), min(num_proc, slots))


def _ranks(count):
    return "%d rank%s" % (count, "" if count == 1 else "s")


def _vector_type():
    from pyspark.ml.linalg import VectorUDT

    return VectorUDT()


def _sample_inputs(frame, sources, features, vector_dtype):
    """One row of the feature columns as the predictor takes them (to learn its outputs)."""
    sample = frame.select(*sources).limit(1)
    if hasattr(sample, "toArrow"):
        rows = sample.toArrow()
        count, columns = rows.num_rows, [rows.column(src) for src in sources]
    else:  # Spark 3.5: through pandas, where a vector is a pyspark.ml.linalg object
        import pyarrow as pa
        from pyspark.ml.linalg import Vector

        rows = sample.toPandas()
        count = len(rows)
        columns = [vectors_to_arrow(np.stack([v.toArray() for v in rows[src]]))
                   if count and isinstance(rows[src].iloc[0], Vector) else pa.Array.from_pandas(rows[src])
                   for src in sources]
    if count == 0:
        raise ValueError("transform needs at least one row to learn the model's output shapes; the DataFrame is empty")
    return [to_numpy(column, f, vector_dtype) for column, f in zip(columns, features)]


# The executors' models, by digest: a reused Python worker loads a model once, not once per task.
_PREDICTORS = {}


def _cached_predictor(digest, factory):
    if digest not in _PREDICTORS:
        _PREDICTORS.clear()  # one model at a time per worker
        _PREDICTORS[digest] = factory()
    return _PREDICTORS[digest]
