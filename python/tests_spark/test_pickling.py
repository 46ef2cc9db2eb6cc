"""What travels by value to the ranks: the modules of the user's own code that define a fit's
model, for the length of the fit; a module the user registered by value stays registered."""

import sys

import cloudpickle
import pytest

torch_util = pytest.importorskip("horovod_rs.spark.torch.util")


@pytest.fixture
def users_module(tmp_path):
    (tmp_path / "users_model.py").write_text("class Net:\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import users_model

        yield users_model
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("users_model", None)
        if "users_model" in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.unregister_pickle_by_value(users_model)


def registered():
    return cloudpickle.list_registry_pickle_by_value()


def test_the_users_module_travels_by_value_during_the_block_only(users_module):
    with torch_util.by_value(users_module.Net()):
        assert "users_model" in registered()
    assert "users_model" not in registered()


def test_a_module_the_user_registered_stays_registered(users_module):
    cloudpickle.register_pickle_by_value(users_module)
    with torch_util.by_value(users_module.Net()):
        assert "users_model" in registered()
    assert "users_model" in registered()
