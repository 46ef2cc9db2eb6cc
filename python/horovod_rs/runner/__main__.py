"""``python -m horovod_rs.runner``: the ``horovodrs`` launcher."""

from horovod_rs.runner import main

main()
