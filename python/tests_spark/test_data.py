"""A rank's data without Spark: Arrow batches in, numpy batch streams out (horovod_rs.spark.common.data)."""

import os

import numpy as np
import pyarrow as pa
import pytest

from horovod_rs.spark.common.columns import ColumnError, to_numpy, vector_arrow_type, vectors_to_arrow
from horovod_rs.spark.common.data import RankData


def batches(rows, per_batch=100, width=3):
    """Batches whose column ``id`` numbers the rows and ``v`` holds ``width`` values derived from it."""
    for start in range(0, rows, per_batch):
        ids = np.arange(start, min(rows, start + per_batch), dtype=np.int64)
        values = np.repeat(ids.astype(np.float32)[:, None], width, axis=1)
        offsets = pa.array(np.arange(0, values.size + 1, width, dtype=np.int32))
        yield pa.RecordBatch.from_arrays([pa.array(ids), pa.ListArray.from_arrays(offsets, pa.array(values.ravel()))],
                                         names=["id", "v"])


def load(rows, budget=1 << 30, tmp_path=None):
    data = RankData(["id", "v"], budget, spill_dir=str(tmp_path) if tmp_path else None)
    for batch in batches(rows):
        data.add(batch)
    return data.finish()


def one_pass(data, batch_size, **kwargs):
    """The ids the stream yields over ``data.rows`` rows' worth of batches."""
    stream = data.stream(batch_size, **kwargs)
    ids = []
    while len(ids) < data.rows:
        batch = next(stream)
        assert len(batch["id"]) == batch_size and batch["v"].shape == (batch_size, 3)
        assert (batch["v"][:, 0] == batch["id"]).all()  # rows stay whole
        ids.extend(batch["id"].tolist())
    return ids


@pytest.mark.parametrize("spill", [False, True])
def test_a_pass_yields_every_row_once_in_equal_batches(spill, tmp_path):
    data = load(1000, budget=1000 if spill else 1 << 30, tmp_path=tmp_path)
    assert data.spilled == spill and data.rows == 1000
    ids = one_pass(data, 100, shuffle=True, seed=3, window_rows=250)
    assert sorted(ids) == list(range(1000))
    assert ids != list(range(1000))  # shuffled
    assert one_pass(data, 100, shuffle=False) == list(range(1000))
    data.close()
    assert not [f for f in os.listdir(tmp_path) if f.startswith("horovod_rs-spill")]


def test_batches_straddle_passes_and_reshuffle(tmp_path):
    data = load(250)
    stream = data.stream(100, shuffle=True, seed=1)
    first = [next(stream)["id"] for _ in range(5)]  # 500 rows: two passes
    ids = np.concatenate(first)
    assert sorted(ids[:250].tolist()) == list(range(250)) and sorted(ids[250:].tolist()) == list(range(250))
    assert ids[:250].tolist() != ids[250:].tolist()


def test_fewer_rows_than_a_batch_repeat_to_fill_it():
    data = load(3)
    batch = next(data.stream(8, shuffle=False))
    assert batch["id"].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]


def test_take_and_adopt_lend_rows_to_a_rank_without_any():
    lender, borrower = load(500), RankData(["id", "v"], 1 << 30).finish()
    assert borrower.rows == 0
    borrower.adopt(lender.take(64))
    assert borrower.rows == 64
    assert sorted(one_pass(borrower, 16, shuffle=False)) == list(range(64))


def test_nulls_and_ragged_arrays_name_the_column():
    with pytest.raises(ColumnError, match="column 'y' has 2 null values \\(of 4 rows\\)"):
        to_numpy(pa.array([1.0, None, 2.0, None]), "y")
    ragged = pa.array([[1.0, 2.0], [3.0], [4.0, 5.0]])
    with pytest.raises(ColumnError, match="column 'v' has arrays of different lengths \\(1 to 2\\)"):
        to_numpy(ragged, "v")
    assert to_numpy(pa.array([[1.0, 2.0], [3.0, 4.0]]), "v").shape == (2, 2)


VECTOR = pa.struct([("type", pa.int8()), ("size", pa.int32()), ("indices", pa.list_(pa.int32())),
                    ("values", pa.list_(pa.float64()))])


def vectors(rows):
    """An ML vector column as Spark's Arrow conversion sends it (VectorUDT's struct): a list of
    floats is a dense vector, ``(size, {index: value})`` a sparse one."""
    def struct(row):
        if isinstance(row, tuple):
            size, entries = row
            return {"type": 0, "size": size, "indices": sorted(entries), "values": [entries[i] for i in sorted(entries)]}
        return {"type": 1, "size": None, "indices": None, "values": row}

    return pa.array([None if row is None else struct(row) for row in rows], VECTOR)


def test_ml_vectors_sent_as_their_struct_become_dense_rows():
    column = vectors([[1.0, 2.0, 3.0], (3, {2: 5.0}), (3, {}), [7.0, 8.0, 9.0]])
    rows = to_numpy(column, "f")
    assert rows.dtype == np.float32 and rows.tolist() == [[1, 2, 3], [0, 0, 5], [0, 0, 0], [7, 8, 9]]
    part = to_numpy(column.slice(1, 3), "f", np.float64)  # a slice: its own rows only
    assert part.dtype == np.float64 and part.tolist() == [[0, 0, 5], [0, 0, 0], [7, 8, 9]]
    assert to_numpy(vectors([(4, {0: 1.5, 3: -2.0})] * 2), "f").tolist() == [[1.5, 0, 0, -2.0]] * 2
    with pytest.raises(ColumnError, match="column 'f' has arrays of different lengths \\(1 to 3\\)"):
        to_numpy(vectors([[1.0], (3, {0: 1.0})]), "f")
    with pytest.raises(ColumnError, match="column 'f' has 1 null value \\(of 2 rows\\)"):
        to_numpy(vectors([[1.0], None]), "f")


def test_predictions_become_dense_vectors_in_spark_mls_struct():
    values = np.array([[0.5, -1.0], [2.0, 3.25], [0.0, 0.0]], dtype=np.float32)
    column = vectors_to_arrow(values)
    assert column.type == vector_arrow_type()
    assert column.to_pylist()[1] == {"type": 1, "size": None, "indices": None, "values": [2.0, 3.25]}
    assert to_numpy(column, "p").tolist() == values.tolist()
    assert len(vectors_to_arrow(np.zeros((0, 3)))) == 0


def test_a_spilled_rank_lends_its_vectors_decoded(tmp_path):
    lender = RankData(["id", "f"], 100, spill_dir=str(tmp_path))
    for start in range(0, 40, 10):
        ids = list(range(start, start + 10))
        rows = [[float(i), 0.0] if i % 2 else (2, {1: float(i)}) for i in ids]
        lender.add(pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), vectors(rows)], names=["id", "f"]))
    lender.finish()
    assert lender.spilled
    borrower = RankData(["id", "f"], 1 << 30).finish()
    borrower.adopt(lender.take(15))
    batch = next(borrower.stream(15, shuffle=False))
    assert batch["id"].tolist() == list(range(15))
    assert batch["f"].dtype == np.float32
    assert batch["f"].tolist() == [[i, 0] if i % 2 else [0, i] for i in range(15)]
    lender.close()
