"""The Spark-side unit tests share one process: the Keras data tests load TensorFlow and the
Lightning ones Triton (through torch), whose LLVMs abort the process unless Triton's loads first."""

from horovod_rs.spark.common.frameworks import triton_before_tensorflow

triton_before_tensorflow()
