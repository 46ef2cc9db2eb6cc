"""Horovod's ``horovod.tensorflow.elastic``: the state of TensorFlow and Keras training, and
``run`` (see ``horovod_rs.common.elastic`` for what elastic means without an elastic driver)."""

import tensorflow as tf

from horovod_rs.common.elastic import ObjectState, run_fn
from horovod_rs.common.exceptions import HorovodInternalError
from horovod_rs.tensorflow.functions import broadcast_object, broadcast_variables
from horovod_rs.tensorflow.mpi_ops import init, rank, shutdown

# The collectives' names in the errors they raise (horovod_rs.tensorflow.mpi_ops).
_COLLECTIVES = ("allreduce:", "allgather:", "broadcast:", "alltoall:", "reducescatter:", "join:")


def run(func):
    """Runs ``func(state, ...)``; a collective that failed (TensorFlow's error from one of ours)
    restores the state's last commit, joins the job again and runs it again."""
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except (tf.errors.FailedPreconditionError, tf.errors.UnknownError,
                tf.errors.DeadlineExceededError) as e:
            if any(name in e.message for name in _COLLECTIVES):
                raise HorovodInternalError(e.message) from e
            raise

    return run_fn(wrapper, _reset)


def _reset():
    shutdown()
    init()


def _variables(optimizer):
    # A property in Keras 3, a method in Keras 2.
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class _VariablesState(ObjectState):
    """State of the variables ``tracked()`` returns (saved as copies, synced from rank 0), plus
    ``kwargs`` as attributes."""

    def __init__(self, tracked, **kwargs):
        self._tracked = tracked
        self._save_variables()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        for var, saved in zip(self._tracked(), self._saved):
            var.assign(saved)
        super().restore()

    def sync(self):
        broadcast_variables(self._tracked(), root_rank=0)
        self._save_variables()
        super().sync()

    def _save_variables(self):
        self._saved = [tf.identity(v) for v in self._tracked()]


class TensorFlowKerasState(_VariablesState):
    """The state of a Keras model and its optimizer (or the model's compiled one), plus
    ``kwargs`` as attributes (epoch, batch...)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        # The optimizer's variables are read each time: Keras creates them at its first step.
        super().__init__(lambda: list(self.model.variables) + _variables(self.optimizer), **kwargs)


class TensorFlowState(_VariablesState):
    """The state of a list of ``tf.Variable``s, plus ``kwargs`` as attributes (TF2, eager)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None:
            raise ValueError("TensorFlowState needs its variables (TensorFlow 2 keeps no global list)")
        self.variables = list(variables)
        super().__init__(lambda: self.variables, **kwargs)
