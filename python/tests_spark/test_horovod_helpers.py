"""Horovod's helpers that scripts and Horovod's tests call outside a fit: the shell runner of its
launcher (``safe_shell_exec``), its ``Timeout``, and ``horovod.spark.common.util``'s shape checks,
per-column lists and host id. (The helpers that read a DataFrame are tested on Spark, in
integration-tests/python/test_horovod_util.py.)"""

import io
import threading
import time

import pytest

from horovod_rs.runner.common.util import safe_shell_exec, timeout
from horovod_rs.spark.common import util


def test_a_command_runs_with_its_environment_and_its_lines_are_prefixed():
    out, err = io.StringIO(), io.StringIO()
    code = safe_shell_exec.execute('echo "$GREETING"; printf "a\\rb\\n"; echo oops >&2; exit 3',
                                   env={"GREETING": "héllo", "PATH": "/usr/bin:/bin"}, stdout=out, stderr=err,
                                   index=1)
    assert code == 3
    assert out.getvalue() == "[1]<stdout>:héllo\n[1]<stdout>:a\r[1]<stdout>:b\n"
    assert err.getvalue() == "[1]<stderr>:oops\n"
    plain = io.StringIO()
    assert safe_shell_exec.execute("echo unprefixed", stdout=plain) == 0
    assert plain.getvalue() == "unprefixed\n"


def test_an_event_stops_the_command_and_what_it_started(monkeypatch, tmp_path):
    monkeypatch.setattr(safe_shell_exec, "GRACEFUL_TERMINATION_TIME_S", 1)
    marker = tmp_path / "child-still-ran"
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    # The shell's child ignores nothing and the shell waits on it: both must go.
    code = safe_shell_exec.execute("(sleep 30; touch %s) & wait" % marker, stdout=io.StringIO(),
                                   stderr=io.StringIO(), events=[stop])
    assert code == 143  # 128 + SIGTERM, as a shell reports it
    assert time.monotonic() - started < 20
    time.sleep(1.5)
    assert not marker.exists()


def test_a_timeout_names_what_it_waited_for():
    deadline = timeout.Timeout(0.0, "Timed out waiting for {activity}. Check the cluster.")
    time.sleep(0.01)
    assert deadline.timed_out() and deadline.remaining() == 0
    with pytest.raises(timeout.TimeoutException,
                       match=r"^Timed out waiting for tasks\. Check the cluster\. Timeout after 0\.0 seconds\.$"):
        deadline.check_time_out_for("tasks")
    timeout.Timeout(60, "never").check_time_out_for("anything")


def test_to_list_repeats_one_value_and_checks_a_list_s_length():
    assert util.to_list(None, 3) is None
    assert util.to_list("loss", 2) == ["loss", "loss"] and util.to_list(["loss"], 2) == ["loss", "loss"]
    assert util.to_list(["a", "b"], 2) == ["a", "b"]
    with pytest.raises(ValueError, match="must be length 3"):
        util.to_list(["a", "b"], 3)


METADATA = {"x1": {"shape": 1}, "x2": {"shape": 1}, "features": {"shape": 12}, "y1": {"shape": 1},
            "y_embedding": {"shape": 12}, "from_parquet": {"shape": None}}
FEATURES, LABELS = ["x1", "x2", "features"], ["y1", "y_embedding"]


def test_shapes_must_hold_as_many_values_as_their_columns():
    check = util.check_shape_compatibility
    check(METADATA, FEATURES, LABELS, [[1], [1], [-1, 3, 4]], [[1], [-1, 3, 4]])
    check(METADATA, FEATURES, LABELS, [[1], [1], [3, 2, 2]], [[1, 1], [-1, 2, 3, 2]])
    # Label shapes, when given, are what the labels are checked against, not the outputs.
    check(METADATA, FEATURES, LABELS, [[1], [1], [-1, 3, 4]], [[7], [5]], [[1], [-1, 3, 4]])
    check(METADATA, ["from_parquet"], LABELS, [[5]])  # a shape the metadata does not know is not checked
    with pytest.raises(ValueError, match=r"column 'features' holds 12 values a row, but the model input shape at "
                                         r"index 2, \[-1, 3, 5\], holds 15"):
        check(METADATA, FEATURES, LABELS, [[1], [1], [-1, 3, 5]])
    with pytest.raises(ValueError, match="column 'y1' holds 1 values a row, but the model output shape"):
        check(METADATA, FEATURES, LABELS, None, [[7], [-1, 3, 4]])
    with pytest.raises(ValueError, match="2 label columns .* but 1 label shapes"):
        check(METADATA, FEATURES, LABELS, None, [[1], [12]], [[-1, 3, 4]])
    with pytest.raises(ValueError, match="3 feature columns .* but 2 model input shapes"):
        check(METADATA, FEATURES, LABELS, [[1], [1]])


def test_the_host_id_is_stable_and_a_container_or_a_salt_is_a_host_of_its_own(monkeypatch):
    monkeypatch.delenv("CONTAINER_ID", raising=False)
    plain = util.host_hash()
    assert util.host_hash() == plain and util.host_hash("") == plain
    monkeypatch.setenv("CONTAINER_ID", "container_01")
    contained = util.host_hash()
    assert contained != plain and util.host_hash() == contained
    assert util.host_hash("salt") not in (plain, contained)
