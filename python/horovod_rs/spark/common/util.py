"""Horovod's ``horovod.spark.common.util``: Databricks detection and ``prepare_data``, which
writes a DataFrame's training and validation rows to the store as Parquet once, for
``fit_on_parquet`` and for backends that cannot take the rows from Spark directly."""

import contextlib
import os
import threading

_cache_lock = threading.Lock()
_cache = {}  # (DataFrame plan, store prefix, validation) -> dataset index
_next_index = [0]
# The prepare_data blocks open in this driver, innermost last, as (store prefix, dataset index):
# fit_on_parquet() without an index inside one trains on its data, as Horovod's documentation has it.
_open_blocks = []


def is_databricks():
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


@contextlib.contextmanager
def prepare_data(num_processes, store, df, label_columns, feature_columns, validation=None,
                 sample_weight_col=None, compress_sparse=False, partitions_per_process=10, verbose=0):
    """Writes ``df``'s feature, label and weight columns to the store as Parquet, split into
    training and validation rows (``validation``: a column name or a fraction), and yields the
    dataset index to pass to ``fit_on_parquet``. The same DataFrame and settings reuse the files
    written before (within this driver). Vectors are written as float arrays."""
    from pyspark.sql import functions as F

    from horovod_rs.spark.common.columns import plan_columns
    from horovod_rs.spark.common.remote import VALIDATION_COLUMN

    columns = list(dict.fromkeys(list(feature_columns) + list(label_columns) +
                                 ([sample_weight_col] if sample_weight_col else [])))
    validation_col = validation if isinstance(validation, str) else None
    expressions, _ = plan_columns(df, columns + ([validation_col] if validation_col and validation_col !=
                                                 VALIDATION_COLUMN else []))
    if validation_col == VALIDATION_COLUMN:
        expressions.append(F.col(VALIDATION_COLUMN))
    frame = df.select(*expressions)
    key = (frame.semanticHash() if hasattr(frame, "semanticHash") else id(df), store.prefix_path, repr(validation))
    with _cache_lock:
        index = _cache.get(key)
        if index is None:
            index = _next_index[0]
            _next_index[0] += 1
            _write(frame, store, index, columns, validation, num_processes, partitions_per_process, verbose)
            _cache[key] = index
        _open_blocks.append((store.prefix_path, index))
    try:
        yield index
    finally:
        with _cache_lock:
            _open_blocks.remove((store.prefix_path, index))


def dataset_of_open_block(store):
    """The dataset index of the innermost ``prepare_data`` block open on ``store``, or None."""
    with _cache_lock:
        return next((index for prefix, index in reversed(_open_blocks) if prefix == store.prefix_path), None)


def has_prepared_data(store, dataset_idx):
    """Whether the store holds prepared training data for ``dataset_idx`` (Parquet files)."""
    path = store.get_localized_path(store.get_train_data_path(dataset_idx))
    return store.fs.exists(path) and any(f.endswith(".parquet") for f in store.fs.find(path))


def _write(frame, store, index, columns, validation, num_processes, partitions_per_process, verbose):
    partitions = max(1, num_processes * partitions_per_process)
    train, val = _split(frame, validation)
    train_path, val_path = store.get_train_data_path(index), store.get_val_data_path(index)
    if verbose:
        print("horovod_rs: writing training data to %s" % train_path)
    train.select(*columns).repartition(partitions).write.mode("overwrite").parquet(train_path)
    if val is not None:
        val.select(*columns).repartition(max(1, partitions // 10)).write.mode("overwrite").parquet(val_path)


def _split(df, validation):
    """``(training rows, validation rows or None)`` of ``df``: ``validation`` a column (its true or
    non-zero rows validate) or a fraction of the rows (a seeded random split)."""
    from pyspark.sql import functions as F

    check_validation(validation, df)
    if isinstance(validation, str):
        mask = F.col("`%s`" % validation).cast("boolean")
        return df.filter(~mask), df.filter(mask)
    if validation:
        return tuple(df.randomSplit([1 - float(validation), float(validation)], seed=0))
    return df, None


def check_validation(validation, df=None):
    """Raises ``ValueError`` unless ``validation`` is None, a fraction in [0, 1) or a column name (of
    ``df``, when given)."""
    if isinstance(validation, str):
        if df is not None and validation not in df.columns:
            raise ValueError("validation column '%s' is not in the DataFrame; its columns are %s"
                             % (validation, ", ".join(df.columns)))
    elif validation is not None and (not isinstance(validation, (int, float)) or not 0 <= float(validation) < 1):
        raise ValueError("validation must be a column name or a fraction in [0, 1), not %r" % (validation,))


def _train_val_split(df, validation):
    """Horovod's split of ``df``: ``(training rows, validation rows or None, the validation
    fraction)``; with a column, that column is dropped from both and the fraction counted."""
    from pyspark.sql import functions as F

    train, val = _split(df, validation)
    if not isinstance(validation, str):
        return train, val, float(validation) if val is not None else 0.0
    # Both sides counted in one job over the rows.
    rows, val_rows = df.agg(F.count(F.lit(1)), F.count(F.when(F.col("`%s`" % validation).cast("boolean"), 1))).first()
    return train.drop(validation), val.drop(validation), val_rows / rows if rows else 0.0


def clear_training_cache():
    """Forgets the datasets ``prepare_data`` wrote (the files stay in the store)."""
    with _cache_lock:
        _cache.clear()


def parquet_column_infos(store, dataset_idx, columns):
    """The ``ColumnInfo`` of each column of a prepared dataset (from its Parquet schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from horovod_rs.spark.common.columns import ARRAY, SCALAR, ColumnInfo

    path = store.get_localized_path(store.get_train_data_path(dataset_idx))
    files = [f for f in sorted(store.fs.find(path)) if f.endswith(".parquet")] if store.fs.exists(path) else []
    if not files:
        raise ValueError("no prepared training data at %s (run prepare_data first, with this dataset index)"
                         % store.get_train_data_path(dataset_idx))
    with store.fs.open(files[0], "rb") as f:
        schema = pq.ParquetFile(f).schema_arrow
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise ValueError("columns %s are not in the prepared data at %s (it has %s)"
                         % (missing, store.get_train_data_path(dataset_idx), schema.names))
    infos = {}
    for c in columns:
        t = schema.field(c).type
        kind = ARRAY if pa.types.is_list(t) or pa.types.is_large_list(t) else SCALAR
        spark_type = {"int32": "int", "int64": "bigint", "double": "double", "bool": "boolean"}.get(str(t), "float")
        infos[c] = ColumnInfo(c, kind, spark_type)
    return infos


_FILE_WAIT_SECONDS = float(os.environ.get("DATABRICKS_FILE_AVAILABILITY_WAIT_TIMEOUT_SECS", 30))


def _wait_file_available_on_dbfs(store, url_list):
    """On Databricks, waits up to ``DATABRICKS_FILE_AVAILABILITY_WAIT_TIMEOUT_SECS`` (30) seconds
    for every file of ``url_list`` to be visible in ``store`` (object stores behind DBFS may show a
    written file late); raises ``TimeoutError`` naming the ones that are not. A no-op for a
    ``LocalStore`` and off Databricks."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from horovod_rs.spark.common.store import LocalStore

    if isinstance(store, LocalStore) or not is_databricks():
        return
    if not url_list:
        raise ValueError("Input url_list argument is empty.")

    def visible(path):
        deadline = time.monotonic() + _FILE_WAIT_SECONDS
        while not store.exists(path):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    with ThreadPoolExecutor(min(len(url_list), 64)) as pool:
        missing = [url for url, seen in zip(url_list, pool.map(visible, url_list)) if not seen]
    if missing:
        raise TimeoutError("Timeout while waiting for all files to appear at urls %s." % ",".join(missing))


def _get_spark_df_saved_file_list(saved_path):
    """The files of the Parquet dataset saved at ``saved_path``, as Spark lists them."""
    from pyspark.sql import SparkSession

    return list(SparkSession.builder.getOrCreate().read.parquet(saved_path).inputFiles())


def _get_col_info(df):
    """Horovod's facts of ``df``'s columns, read from every row (one Spark job over the DataFrame):
    ``(types, shapes, max_sizes)``, each ``{column: ...}``: the Python types of its values (``None``'s
    too), its values' one length (1 for scalars), and the most elements a value holds (a sparse
    vector's stored ones). Raises ``ValueError`` for a column whose rows differ in length, or in
    size unless it holds sparse vectors."""
    from pyspark.ml.linalg import DenseVector, SparseVector

    from horovod_rs.spark.common import session

    if session.is_connect(df.sparkSession):
        raise ValueError("_get_metadata and _get_col_info read every row through the RDD API, which a Spark Connect "
                         "session has not; fit and transform do not need them (they plan the columns from the schema)")

    def row_meta(row):
        for name, value in row.asDict().items():
            if isinstance(value, DenseVector):
                shape = size = value.array.shape[0]
            elif isinstance(value, SparseVector):
                shape, size = value.size, value.indices.shape[0]
            elif isinstance(value, list):
                shape = size = len(value)
            else:
                shape = size = 1
            yield name, ({type(value)}, {shape}, {size})

    def merge(x, y):
        shapes, sizes = x[1] | y[1], x[2] | y[2]
        return x[0] | y[0], {min(shapes), max(shapes)}, {min(sizes), max(sizes)}

    seen = dict(df.rdd.flatMap(row_meta).reduceByKey(merge).collect())
    if not seen:
        raise ValueError("the DataFrame has no rows to read its columns' shapes from")
    types, shapes, max_sizes = {}, {}, {}
    for name in df.columns:
        types[name], column_shapes, sizes = seen[name]
        if len(column_shapes) != 1:
            raise ValueError("Column {col} does not have uniform shape. shape set: {shapes}"
                             .format(col=name, shapes=column_shapes))
        if len(sizes) > 1 and SparseVector not in types[name]:
            raise ValueError("Rows of column {col} have varying sizes. This is only allowed if datatype is "
                             "SparseVector or a mix of Sparse and DenseVector.".format(col=name))
        shapes[name], max_sizes[name] = column_shapes.pop(), max(sizes)
    return types, shapes, max_sizes


def _get_metadata(df):
    """Horovod's metadata of ``df``'s columns: ``{column: {'spark_data_type', 'is_sparse_vector_only',
    'shape', 'intermediate_format', 'max_size'}}``, from ``_get_col_info``. ``fit`` does not need
    it (it plans columns from the schema); a ``HorovodModel`` built with it types its predictions
    as ``fit``'s do."""
    from pyspark.ml.linalg import DenseVector, SparseVector

    from horovod_rs.spark.common import constants

    types, shapes, max_sizes = _get_col_info(df)
    metadata = {}
    for field in df.schema.fields:
        if DenseVector in types[field.name]:
            data_type, sparse_only, target = DenseVector, False, constants.ARRAY
        elif SparseVector in types[field.name]:
            data_type, sparse_only, target = SparseVector, True, constants.CUSTOM_SPARSE
        else:
            data_type, sparse_only, target = type(field.dataType), False, constants.NOCHANGE
        metadata[field.name] = {"spark_data_type": data_type, "is_sparse_vector_only": sparse_only,
                                "shape": shapes[field.name], "intermediate_format": target,
                                "max_size": max_sizes[field.name]}
    return metadata


def check_shape_compatibility(metadata, feature_columns, label_columns, input_shapes=None, output_shapes=None,
                              label_shapes=None):
    """Raises ``ValueError`` unless every feature column holds as many values as its model input's
    shape (``input_shapes``, one per feature column; a ``-1`` dimension counts as one) and every
    label column as many as its label shape (``label_shapes``, else the model's
    ``output_shapes``). ``metadata`` is ``_get_metadata``'s; a column whose shape it does not know
    (``None``) is not checked."""
    import numpy as np

    def elements(shape):
        return abs(int(np.prod(shape)))

    def check(columns, kind, shapes, what):
        if len(columns) != len(shapes):
            raise ValueError("%d %s columns %s, but %d %s shapes %s: give one shape per column"
                             % (len(columns), kind, list(columns), len(shapes), what, list(shapes)))
        for index, (column, shape) in enumerate(zip(columns, shapes)):
            size = metadata[column]["shape"]
            if size is not None and size != elements(shape):
                raise ValueError("column '%s' holds %d values a row, but the %s shape at index %d, %s, holds %d"
                                 % (column, size, what, index, list(shape), elements(shape)))

    if input_shapes is not None:
        check(feature_columns, "feature", input_shapes, "model input")
    if label_shapes is not None and output_shapes is not None and len(label_columns) != len(output_shapes):
        raise ValueError("%d label columns %s, but %d model output shapes %s: give one per label column"
                         % (len(label_columns), list(label_columns), len(output_shapes), list(output_shapes)))
    if label_shapes is not None:
        check(label_columns, "label", label_shapes, "label")
    elif output_shapes is not None:
        check(label_columns, "label", output_shapes, "model output")


def get_output_cols(input_df_schema, output_cols):
    """The columns of a Model's predictions: every input column, then ``output_cols``."""
    return [field.name for field in input_df_schema.fields] + list(output_cols)


def get_spark_df_output_schema(input_df_schema, label_cols, output_cols, metadata):
    """The schema of a Model's predictions: the input's fields, then one nullable field per output
    column, of its label column's type (``metadata`` from ``_get_metadata``; vectors stay vectors)."""
    from pyspark.ml.linalg import DenseVector, SparseVector, VectorUDT
    from pyspark.sql.types import StructField, StructType

    if len(label_cols) != len(output_cols):
        raise ValueError("%d output columns %s for %d label columns %s: give one output column per label column"
                         % (len(output_cols), list(output_cols), len(label_cols), list(label_cols)))
    taken = [col for col in output_cols if col in input_df_schema.names]
    if taken:
        raise ValueError("output columns %s are columns of the DataFrame already (%s)" % (taken, input_df_schema.names))
    fields = list(input_df_schema.fields)
    for label, output in zip(label_cols, output_cols):
        data_type = metadata[label]["spark_data_type"]
        data_type = VectorUDT if data_type in (DenseVector, SparseVector) else data_type
        fields.append(StructField(output, data_type(), True))
    return StructType(fields)


def to_list(var, length):
    """Horovod's per-column list: ``None`` stays ``None``, one value (or a list of one) is repeated
    ``length`` times, a list of ``length`` values is kept; other lengths raise ``ValueError``."""
    if var is None:
        return None
    values = var if isinstance(var, list) else [var]
    if len(values) == 1:
        return values * length
    if len(values) != length:
        raise ValueError("List %s must be length %d (found: %d)" % (values, length, len(values)))
    return values


def host_hash(salt=None):
    """This host's id: the host name and a hash of it with this process's network namespace, YARN's
    container (``CONTAINER_ID``: a container shares no memory with its host's others, so it counts
    as a host of its own) and ``salt`` (when true). Processes with the same id share a host."""
    import hashlib
    import socket

    parts = [socket.gethostname()]
    try:
        parts.append(os.readlink("/proc/self/ns/net"))
    except OSError:
        pass
    parts += [str(salt)] if salt else []
    if os.environ.get("CONTAINER_ID") is not None:
        parts.append(os.environ["CONTAINER_ID"])
    return "%s-%s" % (socket.gethostname(), hashlib.md5("\0".join(parts).encode()).hexdigest())


def _has_vector_column(df):
    """Whether ``df`` has a column of Spark ML vectors."""
    from pyspark.ml.linalg import VectorUDT

    return any(isinstance(field.dataType, VectorUDT) for field in df.schema.fields)


def to_petastorm_fn(schema_cols, metadata):
    """Horovod's row mapper for Parquet that Petastorm reads: in ``schema_cols``, vectors become
    lists of floats; with ``metadata`` (``_get_metadata``) a column of sparse vectors becomes
    Horovod's custom sparse format instead, ``[n, i_1..i_n, v_1..v_n]`` padded with zeros to
    ``2 * max_size + 1``. ``fit`` needs no such step (rows reach the ranks as Arrow); this is for
    scripts that write their own Parquet for ``fit_on_parquet``, which reads such lists."""
    from horovod_rs.spark.common import constants

    def to_petastorm(row):
        from pyspark import Row
        from pyspark.ml.linalg import Vector

        converted = {}
        for col in schema_cols:
            value = row[col]
            if not isinstance(value, Vector):
                continue
            form = metadata[col]["intermediate_format"] if metadata else constants.ARRAY
            if form == constants.CUSTOM_SPARSE:
                padding = [0.0] * (2 * (metadata[col]["max_size"] - len(value.indices)))
                converted[col] = [float(len(value.indices))] + [float(i) for i in value.indices] + \
                    [float(v) for v in value.values] + padding
            else:
                converted[col] = value.toArray().tolist()
        if not converted:
            return row
        values = row.asDict()
        values.update(converted)
        return Row(**values)

    return to_petastorm
