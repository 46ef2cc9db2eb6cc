"""A TensorBoard event file of scalars (a fit's per-epoch metrics), written without TensorFlow.

torch's ``SummaryWriter`` goes through TensorBoard's file layer, which imports TensorFlow when it
is installed: 2 s and more of rank 0's setup in a process that has not loaded it, and TensorFlow
before Triton (``frameworks``). The records here are TensorBoard's own (its ``Event`` protos and
record framing), written to a local file, so TensorBoard reads them as any other run's.
"""

import os
import socket
import time


class ScalarLog:
    """``add_scalar(tag, value, step)`` into a new event file in ``logs_dir``."""

    def __init__(self, logs_dir):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        os.makedirs(logs_dir, exist_ok=True)
        name = "events.out.tfevents.%010d.%s.%d.0" % (time.time(), socket.gethostname(), os.getpid())
        self._records = RecordWriter(open(os.path.join(logs_dir, name), "wb"))
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add_scalar(self, tag, value, step):
        summary_pb2 = self._summary_pb2
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
        self._write(self._event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self):
        self._records.flush()

    def close(self):
        self._records.close()

    def _write(self, event):
        self._records.write(event.SerializeToString())
