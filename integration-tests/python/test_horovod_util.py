"""Horovod's ``horovod.spark.common.util`` helpers that read a DataFrame, as scripts and Horovod's
tests call them: the columns' types and shapes (``_get_col_info``), the training/validation split
(``_train_val_split``), and a Model's output columns and schema."""

import pytest
from pyspark.ml.linalg import DenseVector, SparseVector, VectorUDT
from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, FloatType, IntegerType, StructField,
                               StructType)

from horovod_rs.spark.common import util


@pytest.mark.classic_only  # (the RDD API)
def test_column_info_is_read_from_every_row(spark):
    schema = StructType([StructField("int", IntegerType()), StructField("float", FloatType()),
                         StructField("array", ArrayType(IntegerType())), StructField("dense", VectorUDT()),
                         StructField("sparse", VectorUDT()), StructField("mixed", VectorUDT())])
    df = spark.createDataFrame([[1, 0.5, [1, 1], DenseVector([1.0, 1.0]), SparseVector(2, {1: 1.0}),
                                 DenseVector([1.0, 1.0])],
                                [2, None, [1, 2], DenseVector([1.0, 2.0]), SparseVector(2, {0: 1.0}),
                                 SparseVector(2, {1: 1.0})]], schema)
    types, shapes, max_sizes = util._get_col_info(df)
    assert types == {"int": {int}, "float": {float, type(None)}, "array": {list}, "dense": {DenseVector},
                     "sparse": {SparseVector}, "mixed": {DenseVector, SparseVector}}
    assert shapes == {"int": 1, "float": 1, "array": 2, "dense": 2, "sparse": 2, "mixed": 2}
    assert max_sizes == {"int": 1, "float": 1, "array": 2, "dense": 2, "sparse": 1, "mixed": 2}
    ragged = spark.createDataFrame([[SparseVector(2, {0: 1.0})], [SparseVector(1, {0: 1.0})]],
                                   StructType([StructField("v", VectorUDT())]))
    with pytest.raises(ValueError, match="Column v does not have uniform shape"):
        util._get_col_info(ragged)
    with pytest.raises(ValueError, match="no rows"):
        util._get_col_info(df.limit(0))


def test_rows_split_by_a_fraction_or_by_a_column(spark):
    df = spark.createDataFrame([[float(i), i % 5 == 0, int(i % 5 == 0)] for i in range(100)],
                               StructType([StructField("x", DoubleType()), StructField("flag", BooleanType()),
                                           StructField("marked", IntegerType())]))
    train, val, ratio = util._train_val_split(df, 0.2)
    assert ratio == 0.2 and train.count() + val.count() == 100
    for column in ("flag", "marked"):
        train, val, ratio = util._train_val_split(df, column)
        assert (train.count(), val.count(), ratio) == (80, 20, 0.2)
        assert train.columns == val.columns == [c for c in df.columns if c != column]
        assert {row.x % 5 for row in val.collect()} == {0.0}
    train, val, ratio = util._train_val_split(df, None)
    assert (train, val, ratio) == (df, None, 0.0)
    with pytest.raises(ValueError, match=r"a column name or a fraction in \[0, 1\)"):
        util._train_val_split(df, 1.5)
    with pytest.raises(ValueError, match="validation column 'isVal' is not in the DataFrame"):
        util._train_val_split(df, "isVal")


def test_a_models_output_columns_and_schema_follow_its_labels():
    schema = StructType([StructField("x1", DoubleType()), StructField("features", VectorUDT()),
                         StructField("y1", FloatType(), nullable=False), StructField("y_embedding", VectorUDT())])
    metadata = {"y1": {"spark_data_type": FloatType}, "y_embedding": {"spark_data_type": DenseVector}}
    out = util.get_spark_df_output_schema(schema, ["y1", "y_embedding"], ["y1_pred", "y_embedding_pred"], metadata)
    assert out.names == ["x1", "features", "y1", "y_embedding", "y1_pred", "y_embedding_pred"]
    assert isinstance(out["y1_pred"].dataType, FloatType) and isinstance(out["y_embedding_pred"].dataType, VectorUDT)
    assert util.get_output_cols(schema, ["y1_pred"]) == ["x1", "features", "y1", "y_embedding", "y1_pred"]
    with pytest.raises(ValueError, match=r"output columns \['x1'\] are columns of the DataFrame already"):
        util.get_spark_df_output_schema(schema, ["y1"], ["x1"], metadata)
    with pytest.raises(ValueError, match="give one output column per label column"):
        util.get_spark_df_output_schema(schema, ["y1", "y_embedding"], ["y1_pred"], metadata)
