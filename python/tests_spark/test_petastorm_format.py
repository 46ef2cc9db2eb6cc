"""Horovod's Petastorm-format helpers, which scripts writing their own Parquet for
``fit_on_parquet`` (and Horovod's tests) call: vectors mapped to lists or to Horovod's custom
sparse format, and decoded back by the torch, Lightning and Keras helpers."""

import types

import numpy as np
import pytest
from pyspark import Row
from pyspark.ml.linalg import DenseVector, SparseVector, VectorUDT
from pyspark.sql.types import FloatType, StructField, StructType

from horovod_rs.spark.common import constants, util

SPARSE = SparseVector(6, [1, 4], [2.5, -1.0])
METADATA = {
    "dense": {"intermediate_format": constants.ARRAY, "shape": 3, "max_size": 3},
    "sparse": {"intermediate_format": constants.CUSTOM_SPARSE, "shape": 6, "max_size": 3},
    "y": {"intermediate_format": constants.NOCHANGE, "shape": 1, "max_size": 1},
}


def petastorm_row():
    row = Row(dense=DenseVector([1.0, 2.0, 3.0]), sparse=SPARSE, y=0.5)
    return util.to_petastorm_fn(["dense", "sparse", "y"], METADATA)(row)


def test_vectors_become_lists_and_sparse_ones_horovods_padded_format():
    row = petastorm_row()
    assert row.dense == [1.0, 2.0, 3.0] and row.y == 0.5
    # [count, indices..., values...], padded to 2 * max_size + 1
    assert row.sparse == [2.0, 1.0, 4.0, 2.5, -1.0, 0.0, 0.0]
    # Without metadata every vector becomes its dense list.
    plain = util.to_petastorm_fn(["sparse"], None)(Row(sparse=SPARSE, y=1.0))
    assert plain.sparse == SPARSE.toArray().tolist() and plain.y == 1.0


def test_a_schema_with_a_vector_column_is_told_apart():
    vectors = types.SimpleNamespace(schema=StructType([StructField("f", VectorUDT()), StructField("y", FloatType())]))
    scalars = types.SimpleNamespace(schema=StructType([StructField("y", FloatType())]))
    assert util._has_vector_column(vectors) and not util._has_vector_column(scalars)


def test_torch_and_lightning_decode_the_sparse_rows_dense():
    torch = pytest.importorskip("torch")
    from horovod_rs.spark.torch.remote import _prepare_np_data_fn

    rows = torch.tensor([petastorm_row().sparse] * 2)
    dense = _prepare_np_data_fn()(rows, "sparse", METADATA)
    assert np.array_equal(dense.numpy(), np.stack([SPARSE.toArray()] * 2).astype(np.float32))
    plain = torch.tensor([[1.0, 2.0, 3.0]])
    assert _prepare_np_data_fn()(plain, "dense", METADATA) is plain

    from horovod_rs.spark.lightning.remote import _prepare_data_fn

    prepare = _prepare_data_fn(METADATA)
    assert np.array_equal(prepare("sparse", rows).numpy(), dense.numpy())
    assert prepare("not in the metadata", plain) is plain


def test_keras_reshapes_sparse_rows_dense_and_prepares_inputs_labels_and_weights():
    tf = pytest.importorskip("tensorflow")
    from horovod_rs.spark.keras.util import TFKerasUtil

    source = petastorm_row()
    row = types.SimpleNamespace(dense=tf.constant(source.dense), sparse=tf.constant(source.sparse),
                                y=tf.constant([source.y]), w=tf.constant([0.25]))
    reshaped = TFKerasUtil._reshape_fn("w", ["dense", "sparse"], ["y"], METADATA)(row)
    assert np.allclose(np.asarray(reshaped["sparse"]).ravel(), SPARSE.toArray())
    assert np.allclose(np.asarray(reshaped["dense"]), [1.0, 2.0, 3.0])
    inputs, labels, weights = TFKerasUtil._prep_data_fn(True, "w", ["dense", "sparse"], ["y"], [[-1, 3], [-1, 2, 3]],
                                                        [[-1, 1]], ["out"])(reshaped)
    assert [tuple(x.shape) for x in inputs] == [(1, 3), (1, 2, 3)] and tuple(labels.shape) == (1, 1)
    assert np.allclose(np.asarray(weights["out"]), [0.25])
