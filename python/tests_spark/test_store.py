"""Stores and run checkpoints without Spark (horovod_rs.spark.common.store, .checkpoint)."""

import json
import os

import pytest

from horovod_rs.spark.common.checkpoint import RunWriter, read_state
from horovod_rs.spark.common.store import DBFSLocalStore, FilesystemStore, HDFSStore, LocalStore, Store


def test_create_picks_the_store_by_scheme(tmp_path, monkeypatch):
    assert type(Store.create(str(tmp_path))) is FilesystemStore
    assert Store.create(str(tmp_path)).prefix_path == tmp_path.as_uri()
    assert isinstance(LocalStore(str(tmp_path)), FilesystemStore)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "15.4")
    assert DBFSLocalStore.normalize_path("dbfs:/user/me") == "/dbfs/user/me"
    assert DBFSLocalStore.normalize_path("file:///dbfs/x") == "/dbfs/x"
    assert DBFSLocalStore.matches_dbfs("dbfs:/x") and not DBFSLocalStore.matches_dbfs("dbfs://x")
    with pytest.raises(ValueError, match="not a DBFS path"):
        DBFSLocalStore.normalize_path("/tmp/x")
    assert HDFSStore.matches("hdfs://nn:8020/a") and not HDFSStore.matches("/a")


def test_horovods_paths(tmp_path):
    store = Store.create(str(tmp_path))
    base = tmp_path.as_uri()
    assert store.get_train_data_path(3) == base + "/intermediate_train_data.3"
    assert store.get_val_data_path() == base + "/intermediate_val_data"
    assert store.get_run_path("r1") == base + "/runs/r1" == store.get_checkpoint_path("r1")
    assert store.get_logs_path("r1") == base + "/runs/r1/logs"
    assert store.get_checkpoint_filename() == "checkpoint"
    store.write_text(base + "/runs/r1/note.txt", "hello")
    assert store.exists(base + "/runs/r1/note.txt") and store.read(base + "/runs/r1/note.txt") == b"hello"
    assert not [f for f in os.listdir(tmp_path / "runs" / "r1") if ".tmp-" in f]


def test_checkpoints_alternate_slots_and_a_damaged_one_is_refused(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    local = tmp_path / "local"
    local.mkdir()
    writer = RunWriter(str(local), store.sync_fn("run"), ".bin")
    for epoch in (1, 2, 3):
        with open(writer.next_path(), "wb") as f:
            f.write(b"weights after epoch %d" % epoch)
        writer.commit(epoch, {"loss": [1.0 / e for e in range(1, epoch + 1)]})
    state, data = read_state(store, "run")
    assert state["epochs_done"] == 3 and data == b"weights after epoch 3" and len(state["history"]["loss"]) == 3
    assert sorted(os.listdir(tmp_path / "store" / "runs" / "run")) == ["checkpoint-a.bin", "checkpoint-b.bin",
                                                                      "state.json"]
    # A checkpoint cut off after state.json named it: its checksum no longer matches.
    current = tmp_path / "store" / "runs" / "run" / json.loads(store.read(store.get_run_path("run") +
                                                                          "/state.json"))["checkpoint"]
    current.write_bytes(b"weights after ep")
    with pytest.raises(ValueError, match="does not match the checksum"):
        read_state(store, "run")
    assert read_state(store, "another run") is None


def test_an_unwritable_store_is_named_before_anything_runs(tmp_path):
    Store.create(str(tmp_path)).check_writable()
    assert not os.listdir(tmp_path / "runs")  # the probe is gone
    with pytest.raises(ValueError, match="the store at file:///proc/forbidden_dir cannot be written to"):
        Store.create("/proc/forbidden_dir").check_writable()


def test_a_new_run_never_resumes_another_fit_of_the_same_second(tmp_path, monkeypatch):
    from horovod_rs.spark.common import estimator as common
    from horovod_rs.spark.torch import TorchEstimator

    store = Store.create(str(tmp_path / "store"))
    monkeypatch.setattr(common.time, "time", lambda: 1800000000.5)
    # A fit that finished earlier in the same second, under the id Horovod's rule gives it.
    local = tmp_path / "local"
    local.mkdir()
    writer = RunWriter(str(local), store.sync_fn("pytorch_1800000000"), ".pt")
    with open(writer.next_path(), "wb") as f:
        f.write(b"the earlier fit's weights")
    writer.commit(1, {"loss": [0.5]})
    ids = set()
    for _ in range(2):
        run_id, resume = TorchEstimator(store=store)._run()
        assert resume is None and run_id.startswith("pytorch_1800000000")
        ids.add(run_id)
    assert len(ids) == 2 and "pytorch_1800000000" not in ids
