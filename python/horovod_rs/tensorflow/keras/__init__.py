"""Horovod's tf.keras API on the horovod-rs engine: ``import horovod_rs.tensorflow.keras as hvd``.

``DistributedOptimizer`` averages the gradients of every step across ranks before the wrapped
optimizer (Keras 3, or Keras 2 from ``tf_keras``) applies them; inside ``model.fit``'s compiled
step the exchange runs through ``tf.py_function``. ``callbacks`` has Horovod's callbacks (broadcast, metric average,
learning-rate schedule and warmup, best-model checkpoint).
"""

import functools

import tensorflow as tf

import horovod_rs.tensorflow as _hvd
from horovod_rs.common.basics import *  # noqa: F401,F403  (Horovod's init, size, rank, ... *_built)
from horovod_rs.common.process_sets import *  # noqa: F401,F403  (Horovod's process sets)
from horovod_rs.tensorflow.compression import Compression
from horovod_rs.tensorflow.mpi_ops import Adasum, Average, Sum  # noqa: F401
from horovod_rs.tensorflow.keras import callbacks, elastic  # noqa: F401


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none, process_set=global_process_set):
    """The element-wise average (or ``op``) of ``value`` over the ranks, as a tensor."""
    return _hvd.allreduce(tf.constant(value), average=average, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, op=op, compression=compression, name=name,
                          process_set=process_set)


def allgather(value, name=None, process_set=global_process_set):
    """``value``'s rows from every rank, concatenated in rank order, as a tensor."""
    return _hvd.allgather(tf.constant(value), name=name, process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """Rank ``root_rank``'s ``value`` on every rank, as a tensor."""
    return _hvd.broadcast(tf.constant(value), root_rank, name=name, process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    """``value`` reduced over the ranks, this rank's share of the first dimension, as a tensor."""
    return _hvd.reducescatter(tf.constant(value), name=name, op=op, process_set=process_set)


def broadcast_global_variables(root_rank):
    """TensorFlow 1's broadcast of every global variable: Keras 3 keeps none; use
    ``callbacks.BroadcastGlobalVariablesCallback`` or ``horovod_rs.tensorflow.broadcast_variables``."""
    return _hvd.broadcast_global_variables(root_rank)


def _is_keras3(optimizer):
    try:
        import keras
    except ImportError:
        return False
    return keras.__version__.startswith("3.") and isinstance(optimizer, keras.optimizers.Optimizer)


def _accept_keras2_compile_arguments():
    """Keras 3's ``Model.compile`` takes and ignores ``experimental_run_tf_function``, as Keras 2's
    did since TensorFlow 2.2: Horovod's Keras examples pass it, with the ``DistributedOptimizer``."""
    import keras

    # Replaced where it is defined: Keras compiles a loaded model only if its class's compile is
    # that one (a subclass's own compile is the user's).
    owner = next(c for c in keras.Model.__mro__ if "compile" in vars(c))
    compile_model = owner.compile
    if getattr(compile_model, "_horovod_rs_keras2_arguments", False):
        return

    @functools.wraps(compile_model)
    def compile(self, *args, experimental_run_tf_function=None, **kwargs):
        return compile_model(self, *args, **kwargs)

    compile._horovod_rs_keras2_arguments = True
    owner.compile = compile


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, process_set=global_process_set,
                         scale_local_gradients=True):
    """``optimizer``, with every step's gradients averaged over all ranks before they are applied
    (Horovod's signature; ``device_*`` are accepted, reductions run on the host). All gradients
    of a step are submitted together, so the engine fuses them. An embedding's gradient
    (``IndexedSlices``) is gathered from every rank, or reduced dense with ``sparse_as_dense``.

    ``backward_passes_per_step`` > 1 applies the variables every that many steps, with the sum of
    the steps' averaged gradients (their mean with ``average_aggregated_gradients``), as Horovod
    does. On a Keras 3 optimizer it rides on Keras's ``gradient_accumulation_steps`` and, unlike
    Horovod, exchanges the gradients every step, not once per application (the result is the
    same: averaging is linear). A Keras 2 optimizer (``tf_keras``) is wrapped as Horovod wraps it
    (``keras2``).
    """
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be at least 1, not %d" % backward_passes_per_step)
    if not _is_keras3(optimizer):
        from horovod_rs.tensorflow.keras import keras2

        return keras2.distributed_optimizer(optimizer, name, compression, sparse_as_dense, op,
                                            gradient_predivide_factor, backward_passes_per_step,
                                            average_aggregated_gradients, process_set, scale_local_gradients)
    _accept_keras2_compile_arguments()
    base = optimizer.__class__
    config = optimizer.get_config()
    # Keras averages what it accumulates; Horovod sums unless asked to average.
    scale = 1.0
    if backward_passes_per_step > 1:
        if config.get("gradient_accumulation_steps"):
            raise ValueError("give backward_passes_per_step or the optimizer's gradient_accumulation_steps, not both")
        config["gradient_accumulation_steps"] = backward_passes_per_step
        scale = 1.0 if average_aggregated_gradients else float(backward_passes_per_step)

    # Keras accumulates dense gradients only.
    allreduce_grads = _hvd._gradient_allreduce(compression, sparse_as_dense or backward_passes_per_step > 1, op,
                                               gradient_predivide_factor, process_set)

    class _Distributed(base):
        _hvd_local_vars = frozenset()  # ids of variables registered with register_local_var

        def register_local_var(self, var):
            """Keeps ``var``'s gradient on this rank: it is not reduced over the ranks."""
            # By identity: Keras 3's variables have no ref().
            self._hvd_local_vars = self._hvd_local_vars | {id(var)}

        def apply(self, grads, trainable_variables=None):
            variables = list(trainable_variables if trainable_variables is not None else self._trainable_variables)
            # Named by position: ranks whose graphs name their tensors differently still agree.
            reduced = _hvd._reduce_shared(grads, variables, self._hvd_local_vars, allreduce_grads,
                                          scale_local_gradients, process_set or global_process_set,
                                          name="keras.gradient")
            if scale != 1.0:
                reduced = [None if g is None else g * scale for g in reduced]
            return super(_Distributed, self).apply(reduced, trainable_variables)

    _Distributed.__name__ = base.__name__
    return _Distributed.from_config(config)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               legacy_opts=False):
    """Horovod's ``load_model``: the Keras model saved at ``filepath``, its optimizer wrapped in
    ``DistributedOptimizer`` (with ``compression``) and its state restored as Keras restores it,
    so that training goes on where it was saved. Keras's own optimizers (``legacy_opts``: Keras 2's
    ``keras.optimizers.legacy`` ones) and ``custom_optimizers`` (classes) are wrapped;
    ``custom_objects`` are passed to Keras's ``load_model`` (a name there wins)."""
    keras = tf.keras
    base = keras.optimizers.legacy.Optimizer if legacy_opts else keras.optimizers.Optimizer
    objects = {}
    for cls in _subclasses(base) + list(custom_optimizers or []):
        # Keras 2 looks its own optimizers up by their lower-case names, custom ones and Keras 3 by name.
        objects[cls.__name__] = objects[cls.__name__.lower()] = _Wrapping(cls, compression)
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)


def _subclasses(cls):
    found = []
    for sub in cls.__subclasses__():
        found += [sub] + _subclasses(sub)
    return found


class _Wrapping:
    """Stands for optimizer class ``cls`` while a model loads: builds the optimizer from its saved
    configuration (Keras calls ``from_config``, or Keras 2's older formats the class itself),
    wrapped in ``DistributedOptimizer``."""

    def __init__(self, cls, compression):
        self._cls, self._compression = cls, compression

    def from_config(self, config, custom_objects=None):
        return DistributedOptimizer(self._cls.from_config(config), compression=self._compression)

    def __call__(self, **kwargs):
        return DistributedOptimizer(self._cls(**kwargs), compression=self._compression)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False, groups=None,
                                process_set=global_process_set, local_layers=None, scale_local_gradients=True):
    """``DistributedOptimizer`` that keeps the gradients of ``local_layers`` (Keras layers) on this
    rank (divided by the ranks unless ``scale_local_gradients`` is false, as Horovod)."""
    if op not in (Average, Sum):
        raise ValueError("op currently only supports Average and Sum")
    local_vars = _hvd._local_layer_variables(local_layers)
    distributed = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                       gradient_predivide_factor, op, backward_passes_per_step,
                                       average_aggregated_gradients, process_set, scale_local_gradients)
    for var in local_vars:
        distributed.register_local_var(var)
    return distributed
