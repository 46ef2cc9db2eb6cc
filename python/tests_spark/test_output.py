"""A rank's output on its way to the driver (horovod_rs.spark.common.output), without Spark: live
through the driver's server, or, when the driver is out of reach (a Spark Connect client outside
the cluster), kept and printed by the driver when the job ends."""

import io
import socket
import sys
import time

from horovod_rs.spark.common import output
from horovod_rs.spark.common.output import OutputServer, forward_output, replay


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lines_reach_the_driver_live_with_the_ranks_prefix():
    out = io.StringIO()
    server = OutputServer("token", stdout=out)
    try:
        with forward_output("127.0.0.1:%d" % server.port, "token", 1) as forwarded:
            print("epoch 1 done")
            deadline = time.time() + 30  # the server's thread prints it as it arrives
            while "epoch 1 done" not in out.getvalue() and time.time() < deadline:
                time.sleep(0.01)
        assert forwarded.undelivered() == ""
    finally:
        server.close()
    assert out.getvalue() == "[1]<stdout>:epoch 1 done\n"


def test_lines_that_cannot_reach_the_driver_are_kept_and_replayed(capsys):
    with forward_output("127.0.0.1:%d" % closed_port(), "token", 0) as forwarded:
        print("epoch 1 done")
        print("a warning", file=sys.stderr)
    captured = capsys.readouterr()
    assert "epoch 1 done" in captured.out  # the executor's own log keeps it too
    assert "cannot send output to the driver" in captured.err
    out, err = io.StringIO(), io.StringIO()
    server = OutputServer("token", stdout=out, stderr=err)
    try:
        replay(server, 0, forwarded.undelivered())
    finally:
        server.close()
    assert out.getvalue() == "[0]<stdout>:epoch 1 done\n"
    assert err.getvalue() == "[0]<stderr>:a warning\n"


def test_the_driver_asks_ranks_connected_before_and_after_it_asked():
    server = OutputServer("token", stdout=io.StringIO())
    address = "127.0.0.1:%d" % server.port
    try:
        with forward_output(address, "token", 0, requests=[output.REGROW]) as early:
            assert output.may_ask(output.REGROW) and not output.may_ask("other")
            assert not output.asked(output.REGROW)
            print("connected")  # once the server printed it, it knows this rank
            deadline = time.time() + 30
            while not server._connections and time.time() < deadline:
                time.sleep(0.01)
            server.request(output.REGROW)
            while not output.asked(output.REGROW) and time.time() < deadline:
                time.sleep(0.01)
            assert output.asked(output.REGROW) and early.asked(output.REGROW)
            assert not output.asked("other")
        with forward_output(address, "token", 1) as late:
            assert not output.may_ask(output.REGROW)
            while not late.asked(output.REGROW) and time.time() < deadline:
                time.sleep(0.01)
            assert late.asked(output.REGROW)
    finally:
        server.close()
    assert not output.asked(output.REGROW)  # outside a job's forwarding nothing is asked
