"""horovod-rs for PySpark users: the Spark ML estimator of horovod-rs.jar, from Python."""
