"""Horovod's ``horovod.runner.common.util.config_parser``: a job's options as its ranks'
environment variables."""


def set_env_from_args(env, args):
    """Sets in ``env`` the variables ``args`` (an ``_HorovodArgs``: ``horovodrun``'s options)
    give every rank; returns ``env``."""
    from horovod_rs.runner.launch import ranks_environment

    env.update(ranks_environment(args))
    return env
