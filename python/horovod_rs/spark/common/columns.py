"""DataFrame columns as model inputs: which columns can feed a model, how Spark sends them to the
ranks, and how a rank turns an Arrow batch into numpy arrays column by column (no per-row Python).

On the driver, ``plan_columns`` checks every column the estimator uses and returns the select
expressions: floating columns go as float32 (float64 with ``float_type='double'``), integers as
they are (embedding indices stay exact), booleans as float32, ML vectors (dense or sparse) and
arrays as fixed-length float arrays. In a rank, ``to_numpy`` turns one Arrow column into an array of
shape ``(rows,)`` or ``(rows, width)``, naming the column when it holds nulls or ragged arrays.
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
    is_vector: bool = False  # an ML vector (dense or sparse) sent as a float array


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


def plan_columns(df, columns, float_type="float"):
    """``(select_expressions, {name: ColumnInfo})`` for ``columns`` of ``df``, checked."""
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
            expression = vector_to_array(column, "float32" if float_type == "float" else "float64")
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


class ColumnError(ValueError):
    """A column's values cannot feed the model (nulls, ragged arrays)."""


def to_numpy(array, name):
    """One Arrow column (an Array or ChunkedArray) as numpy: ``(rows,)`` for scalars, ``(rows, width)``
    for fixed-length arrays."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise ColumnError("column '%s' has %d null value%s (of %d rows): drop or fill them first "
                          "(DataFrame.na.drop / na.fill)"
                          % (name, array.null_count, "s" if array.null_count > 1 else "", len(array)))
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        lengths = np.diff(np.asarray(array.offsets))
        width = int(lengths[0]) if len(lengths) else 0
        if len(lengths) and (lengths.min() != lengths.max()):
            raise ColumnError("column '%s' has arrays of different lengths (%d to %d): every row must have the "
                              "same length" % (name, lengths.min(), lengths.max()))
        values = array.flatten()
        if values.null_count:
            raise ColumnError("column '%s' has %d null elements inside its arrays" % (name, values.null_count))
        return values.to_numpy(zero_copy_only=False).reshape(len(array), width)
    if pa.types.is_fixed_size_list(array.type):
        return array.flatten().to_numpy(zero_copy_only=False).reshape(len(array), array.type.list_size)
    return array.to_numpy(zero_copy_only=False)


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
