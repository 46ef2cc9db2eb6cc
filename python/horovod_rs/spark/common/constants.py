"""Horovod's ``horovod.spark.common.constants``: names scripts and Horovod's tests import."""

METRIC_PRINT_FREQUENCY = 100  # rank 0 prints the running averages every this many steps (verbose)

# How a column's values travel to the trainer, as Horovod's metadata names it.
ARRAY = "array"
CUSTOM_SPARSE = "custom_sparse_format"
NOCHANGE = "nochange"

# The kinds of a vector column's rows.
MIXED_SPARSE_DENSE_VECTOR = "mixed_sparse_dense_vector"
SPARSE_VECTOR = "sparse_vector"
DENSE_VECTOR = "dense_vector"

BYTES_PER_GIB = 1 << 30

# Horovod's cap on the memory of all of a host's Petastorm shuffle buffers; named for scripts that
# read it. Here a rank's rows live within HOROVOD_RS_DATA_MEMORY_BYTES instead (docs/estimators.md).
TOTAL_BUFFER_MEMORY_CAP_GIB = 4
