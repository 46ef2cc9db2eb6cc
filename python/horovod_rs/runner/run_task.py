"""A rank of ``horovod_rs.runner.run``: ``python -m horovod_rs.runner.run_task ADDRESS`` fetches
the call from the launching process at ``ADDRESS``, runs it and sends back its result (Horovod's
``horovod.runner.run_task``). An exception in the call is printed and ends the rank with code 1,
which ends the job."""

import os
import sys

import cloudpickle

from horovod_rs.runner.task_data import fetch_call, send_result


def main(address):
    from horovod_rs.common import basics

    secret = bytes.fromhex(os.environ["HOROVOD_RS_SECRET"])
    func = cloudpickle.loads(fetch_call(address, secret))
    result = func()
    # The rank in the job's world (in an elastic job, its last one's), else the one it started as.
    rank = basics.rank() if basics.is_initialized() else int(os.environ["HOROVOD_RANK"])
    send_result(address, secret, rank, cloudpickle.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
