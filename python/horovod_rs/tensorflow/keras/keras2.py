"""``DistributedOptimizer`` for Keras 2 optimizers (``tf_keras``, the ``tf.keras`` of TensorFlow
up to 2.15 or with ``TF_USE_LEGACY_KERAS=1``), where most Horovod scripts were written.

As Horovod's: the gradients are reduced where Keras 2 computes them (``compute_gradients``,
which ``model.fit``'s ``minimize`` calls, ``_compute_gradients`` of the legacy optimizers,
``get_gradients``); custom training loops reduce with ``DistributedGradientTape``. With
``backward_passes_per_step`` > 1 each rank adds up its gradients in variables and the ranks
reduce them every that many steps, when the wrapped optimizer applies them; between those steps
only the optimizer's iteration count moves.
"""

import tensorflow as tf

import horovod_rs.tensorflow as _hvd


class _Aggregation:
    """Horovod's local gradient aggregation (``_agg_helper``): gradients summed over
    ``steps`` passes, then reduced once."""

    def __init__(self, steps, average, sparse_as_dense, reduce):
        self.steps, self.average, self.sparse_as_dense, self.reduce = steps, average, sparse_as_dense, reduce
        self.counter = tf.Variable(0, trainable=False, dtype=tf.int32)
        self.sums = {}

    def compute_gradients(self, grads, variables):
        """The gradients to apply: the reduced sums on the last pass of a round, the sums so far
        on the others (not applied)."""
        summed = []
        for i, grad in enumerate(grads):
            if isinstance(grad, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    raise ValueError("IndexedSlices are not supported when `backward_passes_per_step` > 1 and "
                                     "`sparse_as_dense` is False.")
                grad = tf.convert_to_tensor(grad)
            if grad is None:
                summed.append(None)
                continue
            if i not in self.sums:
                with tf.init_scope():  # made once, outside any tf.function tracing this
                    self.sums[i] = tf.Variable(tf.zeros(grad.shape, grad.dtype), trainable=False)
            self.sums[i].assign_add(grad)
            summed.append(self.sums[i].read_value())
        self.counter.assign_add(1)

        def reduce_and_clear():
            reduced = self.reduce(summed, variables)
            if self.average:
                reduced = [None if g is None else g / self.steps for g in reduced]
            self.counter.assign(0)
            for total in self.sums.values():
                total.assign(tf.zeros_like(total))
            return reduced

        return tf.cond(tf.equal(self.counter, self.steps), reduce_and_clear, lambda: summed)

    def apply_gradients(self, apply, optimizer):
        """``apply()`` after a round's last pass (the counter went back to 0); else the
        optimizer's iteration count only."""
        def count_only():
            optimizer.iterations.assign_add(1)
            return tf.constant(False)

        def applied():
            apply()
            return tf.constant(True)

        return tf.cond(tf.equal(self.counter, 0), applied, count_only)


def distributed_optimizer(optimizer, name, compression, sparse_as_dense, op, gradient_predivide_factor,
                          backward_passes_per_step, average_aggregated_gradients, process_set,
                          scale_local_gradients):
    """``optimizer`` (a Keras 2 optimizer) of a subclass of its class, named as it, that reduces
    its gradients over the ranks."""
    allreduce_grads = _hvd._gradient_allreduce(compression, sparse_as_dense, op, gradient_predivide_factor,
                                               process_set)
    base = optimizer.__class__

    # super is spelled out: autograph converts these methods inside model.fit's tf.function.
    class _Distributed(base):
        _HAS_AGGREGATE_GRAD = True
        _hvd_local_vars = frozenset()
        _agg_helper = None  # Horovod's name: scripts and its tests read its counter

        def register_local_var(self, var):
            """Keeps ``var``'s gradient on this rank: it is not reduced over the ranks."""
            self._hvd_local_vars = self._hvd_local_vars | {id(var)}

        def _hvd_reduce(self, grads, variables):
            # Named by position: ranks whose graphs name their tensors differently still agree.
            return _hvd._reduce_shared(grads, variables, self._hvd_local_vars, allreduce_grads,
                                       scale_local_gradients, process_set, name="keras.gradient")

        def _hvd_reduced(self, grads_and_vars):
            grads_and_vars = list(grads_and_vars)
            if not grads_and_vars:  # a model without trainable weights
                return grads_and_vars
            grads, variables = zip(*grads_and_vars)
            aggregation = self._agg_helper
            reduced = aggregation.compute_gradients(grads, variables) if aggregation \
                else self._hvd_reduce(grads, variables)
            return list(zip(reduced, variables))

        def compute_gradients(self, loss, var_list, tape=None):
            compute = super(_Distributed, self).compute_gradients if hasattr(base, "compute_gradients") else super(_Distributed, self)._compute_gradients
            return self._hvd_reduced(compute(loss, var_list, tape=tape))

        def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
            if not hasattr(base, "_compute_gradients"):  # the newer optimizers compute in compute_gradients
                return self.compute_gradients(loss, var_list, tape=tape)
            return self._hvd_reduced(super(_Distributed, self)._compute_gradients(loss, var_list, grad_loss, tape=tape))

        def get_gradients(self, loss, params):
            grads = super(_Distributed, self).get_gradients(loss, params)
            return [g for g, _ in self._hvd_reduced(list(zip(grads, params)))]

        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            if not self._agg_helper:
                return super(_Distributed, self).apply_gradients(grads_and_vars, *args, **kwargs)
            grads_and_vars = list(grads_and_vars)
            # Slots are made before the condition: no variable may be created inside it.
            variables = [v for _, v in grads_and_vars]
            with tf.init_scope():
                if hasattr(self, "_create_all_weights"):
                    self._create_all_weights(variables)
                else:
                    self.build(variables)
            return self._agg_helper.apply_gradients(
                lambda: super(_Distributed, self).apply_gradients(grads_and_vars, *args, **kwargs), self)

    _Distributed.__name__ = base.__name__
    distributed = _Distributed.from_config(optimizer.get_config())
    if backward_passes_per_step > 1:
        distributed._agg_helper = _Aggregation(backward_passes_per_step, average_aggregated_gradients,
                                               sparse_as_dense, distributed._hvd_reduce)
    return distributed
