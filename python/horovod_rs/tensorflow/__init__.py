"""Horovod's TensorFlow 2 API on the horovod-rs engine: ``import horovod_rs.tensorflow as hvd``.

Names and semantics follow ``horovod.tensorflow``: the collectives on tensors (differentiable),
``DistributedGradientTape`` for custom training loops, ``broadcast_variables`` and the object
helpers, ``Compression``, process sets. ``horovod_rs.tensorflow.keras`` has the Keras API.
TensorFlow 1's sessions and hooks are not provided.
"""

import math
import zlib

import tensorflow as tf

from horovod_rs.common import basics
from horovod_rs.tensorflow import elastic  # noqa: F401  (Horovod's API)
from horovod_rs.tensorflow.compression import Compression
from horovod_rs.tensorflow.functions import (  # noqa: F401  (Horovod's API)
    allgather_object,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from horovod_rs.tensorflow.mpi_ops import (  # noqa: F401  (Horovod's API)
    Adasum,
    Average,
    HorovodInternalError,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    _allreduce,
    _grouped_allreduce,
    _grouped_reducescatter,
    _reducescatter,
    add_process_set,
    allgather,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    ccl_built,
    check_num_rank_power_of_2,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    grouped_allgather,
    handle_average_backwards_compatibility,
    init,
    is_homogeneous,
    is_initialized,
    join,
    local_rank,
    local_rank_op,
    local_size,
    local_size_op,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    process_set_included_op,
    rank,
    rank_op,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    size_op,
    start_timeline,
    stop_timeline,
)
from horovod_rs.tensorflow.util import _executing_eagerly  # noqa: F401


def __getattr__(name):
    # Keras is imported only by scripts that use its layer.
    if name == "SyncBatchNormalization":
        from horovod_rs.tensorflow.sync_batch_norm import SyncBatchNormalization

        return SyncBatchNormalization
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def _sparse_allreduce(slices, op, prescale_factor, postscale_factor, process_set):
    """An ``IndexedSlices`` reduced as Horovod does: every rank's rows and indices gathered
    (duplicate indices add up when applied), divided by the ranks for Average."""
    if op == Adasum:
        raise NotImplementedError("The Adasum reduction does not currently support sparse tensors. As a "
                                  "workaround please pass sparse_as_dense=True to DistributedOptimizer")
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")
    values, indices = grouped_allgather([slices.values, slices.indices], process_set=process_set) \
        if slices.values.dtype == slices.indices.dtype else \
        (allgather(slices.values, process_set=process_set), allgather(slices.indices, process_set=process_set))
    if op == Average:
        values = values / tf.cast(size_op(process_set.process_set_id), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Allreduces of ``tensors`` (``tf.Tensor``, ``tf.Variable`` or ``tf.IndexedSlices``), the dense
    ones submitted together so the engine fuses them. ``op`` is Average unless given."""
    if not tensors:
        return tensors
    op = handle_average_backwards_compatibility(op, average)
    results = [None] * len(tensors)
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            results[i] = _sparse_allreduce(t, op, prescale_factor, postscale_factor, process_set)
    if dense:
        compressed = [compression.compress(tensors[i]) for i in dense]
        reduced = _grouped_allreduce([c for c, _ in compressed], name=name, op=op, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, process_set=process_set)
        for i, r, (_, ctx) in zip(dense, reduced, compressed):
            results[i] = compression.decompress(r, ctx)
    return results


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """The element-wise average (or ``op``: Sum, Min, Max, Product) of ``tensor`` over the ranks
    (of ``process_set``); an ``IndexedSlices`` gathers every rank's rows instead. ``device_*`` are
    accepted for Horovod's signature: reductions run on the host."""
    return grouped_allreduce([tensor], average, device_dense, device_sparse, compression, op, prescale_factor,
                             postscale_factor, process_set, ignore_name_scope, name)[0]


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Each tensor reduced over the ranks, this rank keeping its share of the first dimension."""
    if not tensors:
        return tensors
    compressed = [compression.compress(t) for t in tensors]
    reduced = _grouped_reducescatter([c for c, _ in compressed], op=op, process_set=process_set,
                                     prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """``tensor`` reduced over the ranks (Average by default), this rank keeping its share of the
    first dimension (the first ranks one row more when it does not divide evenly)."""
    compressed, ctx = compression.compress(tensor)
    reduced = _reducescatter(compressed, name=name, op=op, process_set=process_set,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return compression.decompress(reduced, ctx)


def broadcast_global_variables(root_rank):
    """TensorFlow 1's broadcast of every global variable; in TF2 use ``broadcast_variables``."""
    if _executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. "
                           "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def _gradient_allreduce(compression, sparse_as_dense, op, gradient_predivide_factor, process_set):
    """The function that reduces a step's gradients (None stays None) for the tape and the
    optimizer, with Horovod's options."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum:
        raise NotImplementedError("horovod_rs.tensorflow does not run op=Adasum; horovod_rs.torch does")
    # Average splits its division around the sum: 1/f before, f/size after (the engine divides).
    prescale, postscale = (1.0 / gradient_predivide_factor, gradient_predivide_factor) if op == Average else (1.0, 1.0)

    def allreduce_grads(grads, name=None):
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        present = [i for i, g in enumerate(grads) if g is not None]
        # (An elastic job's traced step keeps its exchange at one rank: the world may grow.)
        alone = process_set.size() == 1 and basics.elastic_member() is None
        if alone or not process_set.included() or not present:
            return list(grads)
        reduced = _fused_allreduce([grads[i] for i in present], compression, op, prescale, postscale,
                                   process_set, name)
        out = list(grads)
        for i, r in zip(present, reduced):
            out[i] = r
        return out

    return allreduce_grads


def _fused_allreduce(grads, compression, op, prescale, postscale, process_set, name):
    """A step's gradients reduced in two collectives whatever their count: the dense ones as one
    flat tensor per dtype (after compression), the sparse ones (``IndexedSlices``) gathered as
    Horovod's are, every rank's rows and indices, in one allgather. Each gradient on its own cost
    a rank a Python call inside the step and an engine request, serialized: an MLP's 6 dense
    gradients took 2.4 ms of its step (0.5 ms flat), a tabular model's 22 embeddings 50 ms. The
    collectives' names carry a digest of the members' shapes, so ranks whose gradients differ in
    shape do not exchange them together. Shapes known only at run time, and ops a sparse gradient
    does not take, go one by one as ``grouped_allreduce``'s."""
    sparse_ok = op in (Sum, Average) and prescale == 1.0 and postscale == 1.0
    dense, sparse, others = [], [], []
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices):
            (sparse if sparse_ok and g.values.shape[1:].is_fully_defined() else others).append(i)
        else:
            (dense if tf.convert_to_tensor(g).shape.is_fully_defined() else others).append(i)
    if len(dense) + len(sparse) < 2:
        return grouped_allreduce(grads, compression=compression, op=op, prescale_factor=prescale,
                                 postscale_factor=postscale, process_set=process_set, name=name)
    reducers = (
        (others, lambda gs: grouped_allreduce(gs, compression=compression, op=op, prescale_factor=prescale,
                                              postscale_factor=postscale, process_set=process_set,
                                              name=None if name is None else name + ".unfused")),
        (dense, lambda gs: _flat_allreduce(gs, compression, op, prescale, postscale, process_set, name)),
        (sparse, lambda gs: _gathered_slices(gs, op, process_set, name)),
    )
    out = list(grads)
    for positions, reduce in reducers:
        if positions:
            for i, r in zip(positions, reduce([grads[i] for i in positions])):
                out[i] = r
    return out


def _by_dtype(dtypes):
    """Positions grouped by dtype, in order of first appearance: ``{dtype: [position, ...]}``."""
    groups = {}
    for position, dtype in enumerate(dtypes):
        groups.setdefault(dtype, []).append(position)
    return groups


def _named_group(name, kind, shapes, tensors):
    """``(name, tensors)`` for a fused collective: its name carries a digest of ``shapes`` (the
    members'); unnamed and traced, the tensors are renamed to carry it (the graph keeps names
    unique, so two such groups in one graph do not collide)."""
    digest = "%08x" % zlib.crc32(repr(shapes).encode())
    if name is not None:
        return "%s.%s_%s" % (name, kind, digest), tensors
    if tf.executing_eagerly():
        return "Horovod%s_%s" % (kind, digest), tensors
    return None, [tf.identity(t, name="Horovod%s_%s" % (kind, digest)) for t in tensors]


def _flat_allreduce(grads, compression, op, prescale, postscale, process_set, name):
    """Dense gradients reduced as one flat tensor per dtype (after compression)."""
    compressed = [compression.compress(tf.convert_to_tensor(g)) for g in grads]
    groups = _by_dtype(t.dtype for t, _ in compressed)
    flats = [tf.concat([tf.reshape(compressed[p][0], [-1]) for p in members], 0) for members in groups.values()]
    group_name, flats = _named_group(name, "FusedAllreduce",
                                     [(t.dtype.name, t.shape.as_list()) for t, _ in compressed], flats)
    reduced = _grouped_allreduce(flats, name=group_name, op=op, prescale_factor=prescale,
                                 postscale_factor=postscale, process_set=process_set)
    out = [None] * len(grads)
    for members, flat in zip(groups.values(), reduced):
        tensors = [compressed[p][0] for p in members]
        for p, piece, tensor in zip(members, tf.split(flat, [t.shape.num_elements() for t in tensors]), tensors):
            out[p] = compression.decompress(tf.reshape(piece, tensor.shape), compressed[p][1])
    return out


def _gathered_slices(slices, op, process_set, name):
    """``IndexedSlices`` reduced as ``_sparse_allreduce`` does each, all in one allgather: per
    values dtype, each rank's row counts, its indices and its rows, flat; every rank then sorts the
    gathered tensors back into each gradient's rows from every rank (in rank order). The world's
    size is the gathered counts' (an elastic job's traced step may run in a world of another size
    than the one it was traced in)."""
    groups = _by_dtype(s.values.dtype for s in slices)
    tensors = []
    for members in groups.values():
        tensors.append(tf.stack([tf.shape(slices[p].indices, out_type=tf.int64)[0] for p in members]))
        tensors.append(tf.concat([tf.cast(slices[p].indices, tf.int64) for p in members], 0))
        tensors.append(tf.concat([tf.reshape(slices[p].values, [-1]) for p in members], 0))
    group_name, tensors = _named_group(name, "FusedAllgather",
                                       [(s.values.dtype.name, s.values.shape[1:].as_list()) for s in slices], tensors)
    gathered = grouped_allgather(tensors, name=group_name, process_set=process_set)
    out = [None] * len(slices)
    for g, members in enumerate(groups.values()):
        counts, indices, values = gathered[3 * g:3 * g + 3]
        m = len(members)
        counts = tf.reshape(counts, [-1, m])  # a row per rank of the world the step runs in
        widths = [slices[p].values.shape[1:].num_elements() for p in members]
        unit = math.gcd(*widths) or 1  # the values move in rows of this many: every member's row is a few
        index_pieces = _by_member(indices, counts)
        value_pieces = _by_member(tf.reshape(values, [-1, unit]), counts * tf.constant([w // unit for w in widths],
                                                                                        tf.int64))
        ranks = tf.shape(counts)[0]
        for k, p in enumerate(members):
            s = slices[p]
            rows = tf.reshape(value_pieces[k], [-1] + s.values.shape[1:].as_list())
            if op == Average:
                rows = rows / tf.cast(ranks, rows.dtype)
            out[p] = tf.IndexedSlices(rows, tf.cast(index_pieces[k], s.indices.dtype), dense_shape=s.dense_shape)
    return out


def _by_member(flat, lengths):
    """The pieces of ``flat``'s rows, rank by rank, each rank's members in turn (``lengths``: a row
    per rank, a column per member), as one tensor per member of its pieces in rank order: one
    gather in member order, then a split by member (the world's size is only known when the step
    runs)."""
    ends = tf.reshape(tf.cumsum(tf.reshape(lengths, [-1])), tf.shape(lengths))
    starts = ends - lengths
    order = tf.ragged.range(tf.reshape(tf.transpose(starts), [-1]), tf.reshape(tf.transpose(ends), [-1])).flat_values
    return tf.split(tf.gather(flat, order), tf.reduce_sum(lengths, 0), num=lengths.shape[1])


def _reduce_shared(grads, variables, local, allreduce_grads, scale_local_gradients, process_set, name=None):
    """``grads`` with those of variables outside ``local`` (ids) reduced over the ranks, and as
    Horovod (its pull 3695) the local ones divided by the ranks unless ``scale_local_gradients``
    is false."""
    grads = list(grads)
    shared = [i for i, v in enumerate(variables) if id(v) not in local]
    for i, g in zip(shared, allreduce_grads([grads[i] for i in shared], name=name)):
        grads[i] = g
    if scale_local_gradients and local:
        ranks = size_op(process_set.process_set_id)
        for i, v in enumerate(variables):
            if id(v) in local and grads[i] is not None:
                g = grads[i]
                if isinstance(g, tf.IndexedSlices):
                    grads[i] = tf.IndexedSlices(g.values / tf.cast(ranks, g.values.dtype), g.indices, g.dense_shape)
                else:
                    grads[i] = g / tf.cast(ranks, g.dtype)
    return grads


def _local_layer_variables(local_layers):
    """The trainable variables of Horovod's ``local_layers`` argument (a Keras layer or a list)."""
    # tf.keras is Keras 2 (tf_keras) with TF_USE_LEGACY_KERAS=1, else Keras 3: either's layers.
    layer_types = (tf.keras.layers.Layer,)
    try:
        import keras

        layer_types += (keras.layers.Layer,)
    except ImportError:
        pass
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, layer_types):
        local_layers = [local_layers]
    elif not all(isinstance(layer, layer_types) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    return [var for layer in local_layers for var in layer.trainable_weights]


def _check_groups(groups, num_groups):
    """Horovod's ``groups``/``num_groups`` checked; the engine fuses every step's gradients
    anyway, so the grouping itself changes no result."""
    groups = num_groups if groups is None and num_groups else groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of tf.Variable.")


class _DistributedGradientTape(tf.GradientTape):
    """A ``tf.GradientTape`` whose ``gradient`` averages the gradients over the ranks (the ones of
    registered local sources stay this rank's, divided by the ranks unless
    ``scale_local_gradients=False``). ``super`` is spelled out: autograph converts these methods
    when a tf.function calls them, and its ``super()`` cannot find the class."""

    def __init__(self, persistent, watch_accessed_variables, allreduce_grads, process_set,
                 scale_local_gradients):
        super(_DistributedGradientTape, self).__init__(persistent, watch_accessed_variables)
        self._allreduce_grads = allreduce_grads
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """Keeps ``source``'s gradient on this rank: it is not reduced over the ranks."""
        # By identity, as Horovod's ref(): Keras 3's variables have no ref().
        self._local_sources.add(id(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        flat = tf.nest.flatten(sources)
        grads = super(_DistributedGradientTape, self).gradient(target, flat, output_gradients)
        grads = _reduce_shared(grads, flat, self._local_sources, self._allreduce_grads,
                               self.scale_local_gradients, self.process_set)
        return tf.nest.pack_sequence_as(sources, grads)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        """``(local, global)``: lists of ``(source, gradient)`` for registered local sources and the
        others."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, grads):
            (local if id(s) in self._local_sources else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """``gradtape`` (a ``tf.GradientTape`` that recorded the forward pass) whose ``gradient``
    returns the gradients averaged over the ranks, all submitted together so the engine fuses
    them. ``IndexedSlices`` (embedding gradients) are gathered, or reduced dense with
    ``sparse_as_dense``."""
    _check_groups(groups, num_groups)
    tape = _DistributedGradientTape(gradtape._persistent, gradtape._watch_accessed_variables,
                                    _gradient_allreduce(compression, sparse_as_dense, op, gradient_predivide_factor,
                                                        process_set),
                                    process_set, scale_local_gradients)
    tape._tape = gradtape._tape  # what gradtape recorded
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """``DistributedGradientTape`` that keeps the gradients of ``local_layers`` (Keras layers) on
    this rank."""
    local_vars = _local_layer_variables(local_layers)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients)
    for var in local_vars:
        tape.register_local_source(var)
    return tape


class _DistributedLegacyOptimizer(tf.compat.v1.train.Optimizer):
    """A ``tf.compat.v1.train.Optimizer`` whose ``compute_gradients`` averages the gradients over
    the ranks."""

    def __init__(self, optimizer, name, use_locking, allreduce_grads):
        super().__init__(name=name or "Distributed%s" % type(optimizer).__name__, use_locking=use_locking)
        self._optimizer = optimizer
        self._allreduce_grads = allreduce_grads

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        grads = self._allreduce_grads([g for g, _ in pairs])
        return list(zip(grads, [v for _, v in pairs]))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True):
    """``optimizer`` with its gradients averaged over the ranks: a Keras optimizer goes to
    ``horovod_rs.tensorflow.keras.DistributedOptimizer``; a ``tf.compat.v1.train.Optimizer``
    reduces in ``compute_gradients``."""
    _check_groups(groups, num_groups)
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if backward_passes_per_step > 1:
            raise ValueError("backward_passes_per_step > 1 is not supported for tf.compat.v1.train.Optimizer; "
                             "use a Keras optimizer")
        return _DistributedLegacyOptimizer(optimizer, name, use_locking,
                                           _gradient_allreduce(compression, sparse_as_dense, op,
                                                               gradient_predivide_factor, process_set))
    if op == Adasum:
        raise ValueError("op == Adasum is not supported yet with Keras")
    from horovod_rs.tensorflow import keras as hvd_keras

    return hvd_keras.DistributedOptimizer(optimizer, name=name, device_dense=device_dense,
                                          device_sparse=device_sparse, compression=compression,
                                          sparse_as_dense=sparse_as_dense,
                                          gradient_predivide_factor=gradient_predivide_factor,
                                          backward_passes_per_step=backward_passes_per_step,
                                          average_aggregated_gradients=average_aggregated_gradients,
                                          process_set=process_set)
