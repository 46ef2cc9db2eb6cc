"""A rank's share of the training data: Arrow record batches from its Spark partition (or from
Parquet files), held in memory or spilled to local disk, and served as an endless stream of
equal-sized, shuffled numpy batches.

The stream runs through the rank's rows pass after pass (reshuffled each pass), so every rank can
take the same number of steps per epoch whatever its row count (Horovod's Petastorm readers do the
same with ``num_epochs=None``). Within budget, a pass shuffles all the rank's rows at once; a
spilled partition (an Arrow IPC file, memory-mapped) is shuffled in windows: the file's batches in
random order, rows shuffled within each window, as a shuffle buffer does.

Invariant: one pass yields every row of the rank exactly once, in batches that may straddle the
end of one pass and the start of the next.
"""

import os
import tempfile
import uuid

import numpy as np

from horovod_rs.spark.common.columns import to_numpy

# Bytes of Arrow data a rank keeps in memory before it spills to local disk:
# HOROVOD_RS_DATA_MEMORY_BYTES, else a quarter of the host's memory shared by its ranks, at most 8 GiB.
_MAX_DEFAULT_BUDGET = 8 << 30


def memory_budget(local_size=1):
    configured = os.environ.get("HOROVOD_RS_DATA_MEMORY_BYTES")
    if configured:
        return int(configured)
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        physical = 16 << 30
    return min(_MAX_DEFAULT_BUDGET, physical // 4 // max(1, local_size))


def spill_directory():
    """Spark's local directory of this executor (where shuffle files go), else the temp dir."""
    local_dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    return local_dirs.split(",")[0] if local_dirs else tempfile.gettempdir()


class RankData:
    """The rows of one split (training or validation) on this rank."""

    def __init__(self, columns, budget_bytes, vector_dtype=np.float32, spill_dir=None):
        self.columns = list(columns)
        self._budget = budget_bytes
        self._vector_dtype = vector_dtype
        self._spill_dir = spill_dir or spill_directory()
        self._batches = []  # in memory, until spilled
        self._bytes = 0
        self._writer = None
        self._spill_path = None
        self._mapped = None  # the spilled file's batches, memory-mapped, once finished
        self._arrays = None  # every row as numpy columns, once finished in memory
        self.rows = 0
        self.nulls = {}  # column -> null values among the rows added

    @property
    def spilled(self):
        return self._spill_path is not None

    @property
    def arrays(self):
        """Every row as numpy columns once finished in memory; None when spilled."""
        return self._arrays

    def add(self, batch):
        """Appends an Arrow record batch holding (at least) this split's columns."""
        if batch.num_rows == 0:
            return
        batch = batch.select(self.columns)
        self.rows += batch.num_rows
        for column in self.columns:
            nulls = batch.column(column).null_count
            if nulls:
                self.nulls[column] = self.nulls.get(column, 0) + nulls
        if self._writer is None and self._bytes + batch.nbytes > self._budget:
            self._spill()
        if self._writer is not None:
            self._writer.write_batch(batch)
        else:
            self._batches.append(batch)
            self._bytes += batch.nbytes

    def _spill(self):
        import pyarrow as pa

        os.makedirs(self._spill_dir, exist_ok=True)
        self._spill_path = os.path.join(self._spill_dir, "horovod_rs-spill-%s.arrow" % uuid.uuid4().hex)
        self._sink = pa.OSFile(self._spill_path, "wb")
        self._writer = _LazyWriter(self._sink)
        for batch in self._batches:
            self._writer.write_batch(batch)
        self._batches, self._bytes = [], 0

    def finish(self):
        """Ends loading: in memory, the rows become numpy columns (checked for nulls and ragged
        arrays); spilled, the file is closed and memory-mapped. Nulls are not checked here when
        ``nulls`` says there are some: the caller names them over every rank's rows."""
        if self.nulls:
            return self
        if self._writer is not None:
            import pyarrow as pa

            self._writer.close()
            self._sink.close()
            source = pa.memory_map(self._spill_path, "r")
            self._mapped = pa.ipc.open_file(source)
            self._writer = None
        else:
            self._arrays = _concatenate([self._numpy(b) for b in self._batches], self.columns)
            self._batches = []
        return self

    def close(self):
        """Drops the data and removes the spill file."""
        self._mapped, self._arrays, self._batches = None, None, []
        if self._spill_path and os.path.exists(self._spill_path):
            os.remove(self._spill_path)

    def take(self, rows):
        """Up to ``rows`` of this rank's rows as an Arrow table (to lend to a rank that has none)."""
        if self._arrays is not None:
            pieces = {c: self._arrays[c][:rows] for c in self.columns}
            return _table_from_numpy(pieces)
        # Decoded as the in-memory rows are, so that every lender's rows have the same types.
        pieces, taken = [], 0
        for i in range(self._mapped.num_record_batches):
            batch = self._mapped.get_batch(i).slice(0, rows - taken)
            pieces.append(self._numpy(batch))
            taken += batch.num_rows
            if taken >= rows:
                break
        return _table_from_numpy(_concatenate(pieces, self.columns))

    def _numpy(self, batch):
        return {c: to_numpy(batch.column(c), c, self._vector_dtype) for c in self.columns}

    def adopt(self, table):
        """Takes rows lent by other ranks (this rank, finished, had none of its own)."""
        if self.rows:
            raise ValueError("only a rank without rows adopts others' rows")
        self._arrays = None
        for batch in table.to_batches():
            self.add(batch)
        return self.finish()

    def stream(self, batch_size, shuffle=True, seed=None, window_rows=None):
        """An endless iterator of ``{column: array}`` batches of exactly ``batch_size`` rows."""
        if self.rows == 0:
            raise ValueError("no rows to stream")
        rng = np.random.default_rng(seed)
        carry = None
        for window in self._windows(rng, shuffle, window_rows):
            if carry is not None:
                window = {c: np.concatenate([carry[c], window[c]]) for c in self.columns}
            n = len(window[self.columns[0]])
            start = 0
            while n - start >= batch_size:
                yield {c: window[c][start:start + batch_size] for c in self.columns}
                start += batch_size
            carry = {c: window[c][start:] for c in self.columns}

    def _windows(self, rng, shuffle, window_rows):
        """Pass after pass: each pass's rows as one or more shuffled windows."""
        while True:
            if self._arrays is not None:
                order = rng.permutation(self.rows) if shuffle else None
                yield {c: (a[order] if order is not None else a) for c, a in self._arrays.items()}
                continue
            limit = window_rows or max(1, self.rows)
            batch_order = rng.permutation(self._mapped.num_record_batches) if shuffle else \
                range(self._mapped.num_record_batches)
            pending, pending_rows = [], 0
            for i in batch_order:
                pending.append(self._numpy(self._mapped.get_batch(int(i))))
                pending_rows += len(pending[-1][self.columns[0]])
                if pending_rows >= limit:
                    yield _shuffled(_concatenate(pending, self.columns), rng, shuffle)
                    pending, pending_rows = [], 0
            if pending:
                yield _shuffled(_concatenate(pending, self.columns), rng, shuffle)


class _LazyWriter:
    """An Arrow IPC file writer that takes its schema from the first batch."""

    def __init__(self, sink):
        self._sink, self._writer = sink, None

    def write_batch(self, batch):
        import pyarrow as pa

        if self._writer is None:
            self._writer = pa.ipc.new_file(self._sink, batch.schema)
        self._writer.write_batch(batch)

    def close(self):
        if self._writer is not None:
            self._writer.close()


def _concatenate(pieces, columns):
    if not pieces:
        return {c: np.zeros(0, dtype=np.float32) for c in columns}
    if len(pieces) == 1:
        return pieces[0]
    return {c: np.concatenate([p[c] for p in pieces]) for c in columns}


def _shuffled(arrays, rng, shuffle):
    if not shuffle:
        return arrays
    order = rng.permutation(len(next(iter(arrays.values()))))
    return {c: a[order] for c, a in arrays.items()}


def _table_from_numpy(arrays):
    """numpy columns as an Arrow table (2-D arrays as fixed-width lists)."""
    import pyarrow as pa

    columns = {}
    for name, values in arrays.items():
        if values.ndim == 1:
            columns[name] = pa.array(values)
        else:
            flat = pa.array(values.reshape(-1))
            offsets = pa.array(np.arange(0, values.size + 1, values.shape[1], dtype=np.int32))
            columns[name] = pa.ListArray.from_arrays(offsets, flat)
    return pa.table(columns)
