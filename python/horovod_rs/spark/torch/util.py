"""PyTorch models and optimizers as bytes and back, the same on the driver and in the ranks.

A model travels as a ``torch.save`` file written with cloudpickle, so a model class defined in
the user's own code (a script, a notebook, a module outside site-packages) reaches the executors
by value; the file loads with ``torch.load(path, weights_only=False)`` wherever cloudpickle is
installed. A TorchScript module travels as ``torch.jit.save`` bytes. An optimizer travels as its
class, its ``state_dict`` and the position of each of its parameters among ``model.parameters()``:
optimizers hold their parameters by identity, so they are rebuilt around the parameters of the
model they step.
"""

import contextlib
import inspect
import io
import os

import cloudpickle


def serialize_model(model):
    """The model as bytes (``torch.save`` with cloudpickle, or ``torch.jit.save``)."""
    import torch

    buffer = io.BytesIO()
    if isinstance(model, torch.jit.ScriptModule):
        torch.jit.save(model, buffer)
    else:
        with by_value(model):
            torch.save(model, buffer, pickle_module=cloudpickle)
    return buffer.getvalue()


def dumps(value, what):
    """``value`` pickled for the executors (the user's own code by value); an error naming
    ``what`` when it cannot be."""
    try:
        with by_value(value):
            return cloudpickle.dumps(value)
    except Exception as e:
        raise ValueError("%s cannot be sent to the executors (pickling failed: %s)" % (what, e)) from None


def deserialize_model(data):
    """The inverse of ``serialize_model``, on the CPU."""
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def serialize_fn():
    """Horovod's ``serialize_fn``: a function turning a model into bytes."""
    return serialize_model


def deserialize_fn():
    """Horovod's ``deserialize_fn``: a function turning those bytes back into the model."""
    return deserialize_model


def save_into_bio(obj, save_obj_fn):
    """Horovod's helper: ``obj`` saved by ``save_obj_fn`` into a rewound ``BytesIO``."""
    bio = io.BytesIO()
    save_obj_fn(obj, bio)
    bio.seek(0)
    return bio


def parameter_order(optimizer, model):
    """For each parameter the optimizer holds (in its own order), its index in
    ``model.parameters()``; the identity order when the optimizer holds other tensors of the
    same number (e.g. after both were loaded separately)."""
    params = list(model.parameters())
    index = {id(p): i for i, p in enumerate(params)}
    held = [p for group in optimizer.param_groups for p in group["params"]]
    order = [index.get(id(p)) for p in held]
    if None not in order:
        return order
    if len(held) == len(params):
        return list(range(len(params)))
    raise ValueError("the optimizer holds %d tensors that are not the model's parameters (the model has %d): "
                     "create the optimizer from model.parameters()" % (order.count(None), len(params)))


def rebuild_optimizer(optimizer_cls, state, order, model):
    """A new ``optimizer_cls`` over ``model``'s parameters, in the groups and with the state
    (hyperparameters, moments) of ``state``."""
    params = list(model.parameters())
    groups = [{"params": [params[order[i]] for i in group["params"]]} for group in state["param_groups"]]
    try:
        takes_lr = "lr" in inspect.signature(optimizer_cls).parameters
    except (TypeError, ValueError):
        takes_lr = True
    optimizer = optimizer_cls(groups, lr=1.0) if takes_lr else optimizer_cls(groups)
    optimizer.load_state_dict(state)
    return optimizer


def copy_optimizer(optimizer, model):
    """``optimizer``'s class and state, bound to ``model``'s parameters (Horovod's ``getOptimizer``)."""
    return rebuild_optimizer(type(optimizer), optimizer.state_dict(), parameter_order(optimizer, model), model)


def to_list(value, length):
    """Horovod's ``to_list``: None stays None, one value is repeated ``length`` times, a list must
    have ``length`` values."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        value = [value]
    value = list(value)
    if len(value) == 1:
        return value * length
    if len(value) != length:
        raise ValueError("%d values given where %d (one per label column) are needed" % (len(value), length))
    return value


def _is_user_module(module):
    """A module of the user's own code (a script, a notebook, a test file): executors may not be
    able to import it, so what it defines travels by value."""
    import sys
    import sysconfig

    name = getattr(module, "__name__", "")
    path = getattr(module, "__file__", None)
    if name == "__main__" or not path or name.split(".")[0] in ("torch", "horovod_rs", "pyspark", "numpy"):
        return False
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    installed |= {sys.prefix, sys.base_prefix}
    if any(os.path.abspath(path).startswith(os.path.abspath(p) + os.sep) for p in installed):
        return False
    # Installed packages reached through a .pth file (an environment layered on another).
    return not {"site-packages", "dist-packages"} & set(os.path.abspath(path).split(os.sep))


def _modules_of(value, seen=None):
    """The modules defining ``value``'s classes and functions (a model's layers, a list of losses)."""
    import inspect
    import sys
    import types

    seen = seen if seen is not None else set()
    if id(value) in seen:
        return set()
    seen.add(id(value))
    found = set()
    if isinstance(value, (list, tuple, set)):
        for item in value:
            found |= _modules_of(item, seen)
        return found
    if isinstance(value, dict):
        for item in value.values():
            found |= _modules_of(item, seen)
        return found
    if isinstance(value, (types.FunctionType, type)):
        owners = [value] if isinstance(value, types.FunctionType) else list(inspect.getmro(value))
    else:
        owners = list(inspect.getmro(type(value)))
        children = getattr(value, "modules", None)
        if callable(children) and hasattr(value, "_modules"):
            owners += [type(child) for child in children()]
    for owner in owners:
        module = sys.modules.get(getattr(owner, "__module__", None) or "")
        if module is not None and _is_user_module(module):
            found.add(module)
    return found


@contextlib.contextmanager
def by_value(*values):
    """Within the block, cloudpickle pickles the user's modules that define ``values`` by value."""
    modules = set()
    for value in values:
        modules |= _modules_of(value)
    registered = []
    # A module the user registered stays registered after the block: register (and later
    # unregister) only the others (registering twice is no error, unregistering is for good).
    already = set(cloudpickle.list_registry_pickle_by_value())
    try:
        for module in modules:
            if module.__name__ in already:
                continue
            try:
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
            except ValueError:
                pass  # not in sys.modules: it cannot be registered
        yield
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)
