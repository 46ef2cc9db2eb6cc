"""horovod_rs for TensorFlow: see horovod_rs.tensorflow.keras."""
