"""A rank's rows of a Parquet dataset in the store (``prepare_data``, ``fit_on_parquet``).

The dataset's rows are numbered across its files and row groups, and rank ``r`` of ``n`` reads
rows ``[r * N / n, (r + 1) * N / n)``: only the row groups that overlap its range, sliced to it.
So every rank gets its share whatever the number of files or row groups (Petastorm shards by row
group and refuses datasets with fewer row groups than ranks, horovod/horovod#3266).
"""


def rank_batches(store, path, rank, size, columns, mark=None):
    """This rank's rows of the dataset at ``path`` as Arrow record batches of ``columns``; with
    ``mark`` (a bool), each batch also gets the validation column set to it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from horovod_rs.spark.common.remote import VALIDATION_COLUMN

    fs = store.fs
    files = [f for f in sorted(fs.find(store.get_localized_path(path))) if f.endswith(".parquet")]
    groups = []  # (file, row group, first row, rows)
    total = 0
    for name in files:
        with fs.open(name, "rb") as f:
            metadata = pq.ParquetFile(f).metadata
        for g in range(metadata.num_row_groups):
            rows = metadata.row_group(g).num_rows
            groups.append((name, g, total, rows))
            total += rows
    begin, end = rank * total // size, (rank + 1) * total // size
    for name, g, first, rows in groups:
        if first + rows <= begin or first >= end:
            continue
        with fs.open(name, "rb") as f:
            table = pq.ParquetFile(f).read_row_group(g, columns=columns)
        table = table.slice(max(0, begin - first), min(end, first + rows) - max(begin, first))
        if mark is not None:
            table = table.append_column(VALIDATION_COLUMN, pa.array([mark] * table.num_rows, type=pa.bool_()))
        yield from table.to_batches()
