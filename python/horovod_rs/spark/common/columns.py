"""DataFrame columns as model inputs: which columns can feed a model, how Spark sends them to the
ranks, and how a rank turns an Arrow batch into numpy arrays column by column (no per-row Python).

On the driver, ``plan_columns`` checks every column the estimator uses and returns the select
expressions: floating columns go as float32 (float64 with ``float_type='double'``), integers as
they are (embedding indices stay exact), booleans as float32, ML vectors (dense or sparse) and
arrays as fixed-length float arrays, or vectors as they are (``vectors_as_structs``): Spark's
Arrow conversion then sends each as its struct (type, size, indices, values), which a rank decodes.
In a rank, ``to_numpy`` turns one Arrow column into an array of shape ``(rows,)`` or
``(rows, width)``, naming the column when it holds nulls or ragged arrays; ``vectors_to_arrow``
turns predictions back into vectors' structs, which Spark reads as a vector column.
"""

from dataclasses import dataclass

import numpy as np

SCALAR, ARRAY = "scalar", "array"


@dataclass(frozen=True)
class ColumnInfo:
    """How one DataFrame column reaches the ranks."""

    name: str
    kind: str  # SCALAR or ARRAY
    spark_type: str  # the DataFrame's own type, for messages and for transform's output types
    is_vector: bool = False  # an ML vector (dense or sparse), sent as a float array or as its struct


def numpy_float(float_type):
    """The numpy type of an estimator's ``float_type`` ("float" or "double"): what floating
    columns and ML vectors become on the ranks."""
    return np.float32 if float_type == "float" else np.float64


def _supported(name, data_type):
    """Raises for types no model can take."""
    from pyspark.sql import types as T

    if isinstance(data_type, (T.NumericType, T.BooleanType)):
        return
    if isinstance(data_type, T.ArrayType) and isinstance(data_type.elementType, (T.NumericType, T.BooleanType)):
        return
    if _is_vector(data_type):
        return
    raise ValueError("column '%s' has type %s, which cannot feed a model: use numeric, boolean, array of numbers "
                     "or ML vector columns (convert or drop '%s' first)" % (name, data_type.simpleString(), name))


def _is_vector(data_type):
    from pyspark.ml.linalg import VectorUDT

    return isinstance(data_type, VectorUDT)


def plan_columns(df, columns, float_type="float", vectors_as_structs=False):
    """``(select_expressions, {name: ColumnInfo})`` for ``columns`` of ``df``, checked.

    ``vectors_as_structs``: ML vectors are selected as they are, for ``to_numpy`` to decode, rather
    than through ``vector_to_array``, whose first use in an executor costs seconds (on Spark 4 its
    class registers Spark ML's SQL functions: Scala's runtime reflection and Spark's function
    registry start, 2.5 s on a 2-core host) and which builds an array per row. For rows that reach a
    rank through Arrow only (see ``sending_vectors``): Parquet files and pandas rows keep the arrays."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = {f.name: f for f in df.schema.fields}
    missing = [c for c in columns if c not in fields]
    if missing:
        raise ValueError("column%s %s not found in the DataFrame; its columns are %s"
                         % ("s" if len(missing) > 1 else "", ", ".join("'%s'" % c for c in missing),
                            ", ".join(fields)))
    expressions, infos = [], {}
    for name in dict.fromkeys(columns):  # each once, in order
        data_type = fields[name].dataType
        _supported(name, data_type)
        column = F.col("`%s`" % name)
        if _is_vector(data_type):
            expression = column if vectors_as_structs else \
                vector_to_array(column, np.dtype(numpy_float(float_type)).name)
            info = ColumnInfo(name, ARRAY, "vector", is_vector=True)
        elif isinstance(data_type, T.ArrayType):
            element = data_type.elementType
            cast = element if isinstance(element, T.IntegralType) else T.FloatType() if float_type == "float" \
                else T.DoubleType()
            expression = column.cast(T.ArrayType(cast))
            info = ColumnInfo(name, ARRAY, data_type.simpleString())
        elif isinstance(data_type, T.IntegralType):
            expression = column
            info = ColumnInfo(name, SCALAR, data_type.simpleString())
        else:  # float, double, decimal, boolean
            expression = column.cast(float_type)
            info = ColumnInfo(name, SCALAR, data_type.simpleString())
        expressions.append(expression.alias(name))
        infos[name] = info
    return expressions, infos


def sending_vectors(spark, infos):
    """A context for the job that sends ``infos``' columns to the ranks. Spark 4 checks an Arrow
    batch's bytes (``spark.sql.execution.arrow.maxBytesPerBatch``) after every row it adds, and on a
    struct whose list is null in every row (a dense vector's indices) each check walks the batch so
    far: dense vectors sent as structs took 3 times as long. So while ML vectors go as structs the
    fit lifts that cap (unless the session sets it): a batch is then
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, as on Spark 3.5."""
    from contextlib import nullcontext

    from horovod_rs.spark.common import session

    if not any(info.is_vector for info in infos.values()) or session.spark_version(spark) < (4, 0):
        return nullcontext()  # (Spark 3.5 has no such cap)
    return session.setting_unless_set(spark, "spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))


class ColumnError(ValueError):
    """A column's values cannot feed the model (nulls, ragged arrays)."""


def to_numpy(array, name, vector_dtype=np.float32):
    """One Arrow column (an Array or ChunkedArray) as numpy: ``(rows,)`` for scalars, ``(rows, width)``
    for fixed-length arrays and for ML vectors sent as their struct (of ``vector_dtype``)."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise ColumnError("column '%s' has %d null value%s (of %d rows): drop or fill them first "
                          "(DataFrame.na.drop / na.fill)"
                          % (name, array.null_count, "s" if array.null_count > 1 else "", len(array)))
    if pa.types.is_struct(array.type) and {f.name for f in array.type} == _VECTOR_FIELDS:
        return _vectors_to_numpy(array, name, vector_dtype)
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        lengths = np.diff(np.asarray(array.offsets))
        width = int(lengths[0]) if len(lengths) else 0
        _check_widths(lengths, name)
        values = array.flatten()
        if values.null_count:
            raise ColumnError("column '%s' has %d null elements inside its arrays" % (name, values.null_count))
        return values.to_numpy(zero_copy_only=False).reshape(len(array), width)
    if pa.types.is_fixed_size_list(array.type):
        return array.flatten().to_numpy(zero_copy_only=False).reshape(len(array), array.type.list_size)
    return array.to_numpy(zero_copy_only=False)


def _check_widths(widths, name):
    if len(widths) and widths.min() != widths.max():
        raise ColumnError("column '%s' has arrays of different lengths (%d to %d): every row must have the "
                          "same length" % (name, widths.min(), widths.max()))


# The struct of Spark ML's VectorUDT: type 0 sparse (size, indices, values), 1 dense (values).
_VECTOR_FIELDS = {"type", "size", "indices", "values"}


def _vectors_to_numpy(array, name, dtype):
    """ML vectors, as ``VectorUDT`` stores them, as a dense ``(rows, size)`` array: each value
    goes to its row and its position (its index in a sparse vector, its place in a dense one)."""
    fields = dict(zip([f.name for f in array.type], array.flatten()))  # (flatten: a slice's own rows)
    rows = len(array)
    dense = fields["type"].to_numpy(zero_copy_only=False) == 1
    offsets = np.asarray(fields["values"].offsets)
    offsets = offsets - offsets[0]
    counts = np.diff(offsets)
    sizes = np.where(dense, counts, fields["size"].fill_null(0).to_numpy(zero_copy_only=False))
    _check_widths(sizes, name)
    width = int(sizes[0]) if rows else 0
    flat = fields["values"].flatten().to_numpy(zero_copy_only=False)
    if dense.all():
        return flat.astype(dtype, copy=False).reshape(rows, width)
    out = np.zeros((rows, width), dtype)
    in_dense = np.repeat(dense, counts)
    column = np.empty(len(flat), np.int64)
    column[in_dense] = (np.arange(len(flat)) - np.repeat(offsets[:-1], counts))[in_dense]
    column[~in_dense] = fields["indices"].flatten().to_numpy(zero_copy_only=False)
    out[np.repeat(np.arange(rows), counts), column] = flat
    return out


def vector_arrow_type():
    """The Arrow type of Spark ML's VectorUDT: how Spark's Arrow conversion carries a vector."""
    import pyarrow as pa

    return pa.struct([pa.field("type", pa.int8(), nullable=False), ("size", pa.int32()),
                      ("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float64()))])


def vectors_to_arrow(values):
    """Rows of ``values`` (``(rows, width)``) as dense ML vectors in VectorUDT's struct, which Spark
    reads back as a vector column (no ``array_to_vector``, whose first use in an executor costs as
    ``vector_to_array``'s does)."""
    import pyarrow as pa

    rows, width = values.shape
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    flat = pa.array(np.ascontiguousarray(values, dtype=np.float64).reshape(-1))
    return pa.StructArray.from_arrays(
        [pa.array(np.ones(rows, np.int8)), pa.nulls(rows, pa.int32()), pa.nulls(rows, pa.list_(pa.int32())),
         pa.ListArray.from_arrays(offsets, flat)], fields=list(vector_arrow_type()))


def info_of_metadata(name, entry):
    """The ``ColumnInfo`` of Horovod's metadata entry for a column (``util._get_metadata``'s), for a
    Model built with Horovod's metadata; a ``ColumnInfo`` stays as it is."""
    from pyspark.ml.linalg import DenseVector, SparseVector

    if isinstance(entry, ColumnInfo):
        return entry
    data_type = entry["spark_data_type"]
    if data_type in (DenseVector, SparseVector):
        return ColumnInfo(name, ARRAY, "vector", is_vector=True)
    try:
        spark_type = data_type().simpleString()
    except TypeError:  # a type with arguments (arrays, structs): its name is enough here
        spark_type = data_type.typeName()
    return ColumnInfo(name, SCALAR if entry.get("shape", 1) == 1 else ARRAY, spark_type)


def spark_output_type(values, like=None):
    """The Spark type ``transform`` gives a prediction column: a vector for wide outputs (or when
    the label is a vector), else the label's scalar type (float by default)."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import types as T

    if values > 1 or (like is not None and like.is_vector):
        return VectorUDT()
    scalar = {"int": T.IntegerType(), "bigint": T.LongType(), "smallint": T.ShortType(), "tinyint": T.ByteType(),
              "double": T.DoubleType(), "boolean": T.BooleanType()}
    return scalar.get(like.spark_type if like is not None else None, T.FloatType())
