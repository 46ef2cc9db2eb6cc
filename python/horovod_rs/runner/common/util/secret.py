"""A job's secret key (Horovod's ``horovod.runner.common.util.secret``): the ranks of a job prove
to one another that they belong to it with it (the engine's rendezvous authenticates with it)."""

import hashlib
import hmac
import os

SECRET_LENGTH = 32  # bytes
DIGEST_LENGTH = 32  # bytes
HOROVOD_SECRET_KEY = "_HOROVOD_SECRET_KEY"


def make_secret_key():
    return os.urandom(SECRET_LENGTH)


def compute_digest(key, message):
    return hmac.new(key, message, hashlib.sha256).digest()


def check_digest(key, message, digest):
    return hmac.compare_digest(compute_digest(key, message), digest)
