"""Where an estimator's runs live: checkpoints, logs, the final model, and (with ``prepare_data``)
the training data as Parquet. Horovod's ``horovod.spark.common.store``, same classes and methods.

``Store.create(path)`` picks by scheme: ``hdfs://`` -> ``HDFSStore``; ``dbfs:/``, ``/dbfs/``,
``file:/dbfs/`` on Databricks -> ``DBFSLocalStore``; anything else -> ``FilesystemStore`` (any fsspec
URL: ``file://``, ``s3://``, ``gs://``, ``abfs://``; a plain path is a local directory).

Layout under the prefix (as Horovod's): ``intermediate_train_data.<idx>`` and
``intermediate_val_data.<idx>`` (Parquet, only with ``prepare_data``/``fit_on_parquet``), and
``runs/<run_id>/`` with a run's checkpoint files and ``logs/`` (TensorBoard). Unlike Horovod, the
estimators do not need the store for their data: it goes from Spark to the ranks as Arrow.

Writes are atomic where the filesystem allows: a file is written under a temporary name and
renamed, so a reader never sees half a file (object stores copy on rename; see docs/estimators.md).
"""

import contextlib
import os
import pathlib
import posixpath
import re
import tempfile
import uuid

from horovod_rs.spark.common.util import is_databricks


def _fsspec():
    try:
        import fsspec
    except ImportError:
        raise ImportError("horovod_rs stores need fsspec: pip install 'horovod_rs[spark]' (or fsspec)") from None
    return fsspec


def _split_protocol(path):
    match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$", path)
    return (match.group(1), match.group(2)) if match else (None, path)


class Store:
    """Storage for a run's artifacts (checkpoints, logs) and prepared data."""

    def is_parquet_dataset(self, path):
        raise NotImplementedError()

    def get_parquet_dataset(self, path):
        raise NotImplementedError()

    def get_train_data_path(self, idx=None):
        raise NotImplementedError()

    def get_val_data_path(self, idx=None):
        raise NotImplementedError()

    def get_test_data_path(self, idx=None):
        raise NotImplementedError()

    def saving_runs(self):
        raise NotImplementedError()

    def get_runs_path(self):
        raise NotImplementedError()

    def get_run_path(self, run_id):
        raise NotImplementedError()

    def get_checkpoint_path(self, run_id):
        raise NotImplementedError()

    def get_checkpoints(self, run_id, suffix=".ckpt"):
        raise NotImplementedError()

    def get_logs_path(self, run_id):
        raise NotImplementedError()

    def get_checkpoint_filename(self):
        raise NotImplementedError()

    def get_logs_subdir(self):
        raise NotImplementedError()

    def exists(self, path):
        raise NotImplementedError()

    def read(self, path):
        raise NotImplementedError()

    def write_text(self, path, text):
        raise NotImplementedError()

    def get_local_output_dir_fn(self, run_id):
        raise NotImplementedError()

    def sync_fn(self, run_id):
        raise NotImplementedError()

    def to_remote(self, run_id, dataset_idx):
        """The paths and functions a rank needs, as a plain picklable object (Horovod's RemoteStore)."""
        attrs = self._remote_attrs(run_id, dataset_idx)

        class RemoteStore:
            def __init__(self):
                for name, attr in attrs.items():
                    setattr(self, name, attr)

        return RemoteStore()

    def _remote_attrs(self, run_id, dataset_idx):
        return {
            "train_data_path": self.get_train_data_path(dataset_idx),
            "val_data_path": self.get_val_data_path(dataset_idx),
            "test_data_path": self.get_test_data_path(dataset_idx),
            "saving_runs": self.saving_runs(),
            "runs_path": self.get_runs_path(),
            "run_path": self.get_run_path(run_id),
            "checkpoint_path": self.get_checkpoint_path(run_id),
            "logs_path": self.get_logs_path(run_id),
            "checkpoint_filename": self.get_checkpoint_filename(),
            "logs_subdir": self.get_logs_subdir(),
            "get_local_output_dir": self.get_local_output_dir_fn(run_id),
            "sync": self.sync_fn(run_id),
            "check_writable": self.check_writable,
        }

    @staticmethod
    def create(prefix_path, *args, **kwargs):
        """The store for ``prefix_path``, chosen by its scheme."""
        if HDFSStore.matches(prefix_path):
            return HDFSStore(prefix_path, *args, **kwargs)
        if is_databricks() and DBFSLocalStore.matches_dbfs(prefix_path):
            return DBFSLocalStore(prefix_path, *args, **kwargs)
        return FilesystemStore(prefix_path, *args, **kwargs)


class AbstractFilesystemStore(Store):
    """A store on a filesystem: the paths, reads and writes; subclasses say which filesystem."""

    def __init__(self, prefix_path, train_path=None, val_path=None, test_path=None, runs_path=None,
                 save_runs=True, storage_options=None, checkpoint_filename=None, **kwargs):
        self.prefix_path = self.get_full_path(prefix_path)
        self._train_path = self._get_full_path_or_default(train_path, "intermediate_train_data")
        self._val_path = self._get_full_path_or_default(val_path, "intermediate_val_data")
        self._test_path = self._get_full_path_or_default(test_path, "intermediate_test_data")
        self._runs_path = self._get_full_path_or_default(runs_path, "runs")
        self._save_runs = save_runs
        self.storage_options = storage_options
        self.checkpoint_filename = checkpoint_filename or "checkpoint"

    def exists(self, path):
        return self.fs.exists(self.get_localized_path(path))

    def read(self, path):
        with self.fs.open(self.get_localized_path(path), "rb") as f:
            return f.read()

    def write(self, path, data):
        """Writes ``data`` (bytes) to ``path`` atomically: a temporary name, then a rename."""
        local = self.get_localized_path(path)
        self.fs.makedirs(posixpath.dirname(local), exist_ok=True)
        temporary = "%s.tmp-%s" % (local, uuid.uuid4().hex[:8])
        with self.fs.open(temporary, "wb") as f:
            f.write(data)
        self.fs.mv(temporary, local)

    def write_text(self, path, text):
        self.write(path, text.encode("utf-8"))

    def check_writable(self):
        """Fails, naming the store and why, unless this process can write to the runs path (a fit
        checks it on the driver before any Spark job, and rank 0 on its executor before it trains,
        not at the first checkpoint)."""
        probe = posixpath.join(self.get_runs_path(), ".horovod_rs-write-check-%s" % uuid.uuid4().hex[:8])
        try:
            self.write(probe, b"")
            self.delete(probe)
        except (OSError, ValueError) as e:
            raise ValueError("the store at %s cannot be written to (%s: %s): give the estimator a store in a "
                             "writable directory" % (self.prefix_path, type(e).__name__, e)) from None

    def delete(self, path):
        """Removes ``path`` (a file or a directory tree) if it exists."""
        local = self.get_localized_path(path)
        if self.fs.exists(local):
            self.fs.rm(local, recursive=True)

    def is_parquet_dataset(self, path):
        try:
            return bool(self._parquet_files(path))
        except (OSError, ValueError):
            return False

    def _parquet_files(self, path):
        local = self.get_localized_path(path)
        return sorted(p for p in self.fs.find(local) if p.endswith(".parquet"))

    def get_parquet_dataset(self, path):
        import pyarrow.parquet as pq

        return pq.ParquetDataset(self.get_localized_path(path), filesystem=self.fs)

    def get_train_data_path(self, idx=None):
        return "%s.%s" % (self._train_path, idx) if idx is not None else self._train_path

    def get_val_data_path(self, idx=None):
        return "%s.%s" % (self._val_path, idx) if idx is not None else self._val_path

    def get_test_data_path(self, idx=None):
        return "%s.%s" % (self._test_path, idx) if idx is not None else self._test_path

    def saving_runs(self):
        return self._save_runs

    def get_runs_path(self):
        return self._runs_path

    def get_run_path(self, run_id):
        return posixpath.join(self.get_runs_path(), run_id)

    def get_checkpoint_path(self, run_id):
        return self.get_run_path(run_id) if self._save_runs else None

    def get_checkpoints(self, run_id, suffix=".ckpt"):
        directory = self.get_localized_path(self.get_checkpoint_path(run_id))
        return sorted(name for name in self.fs.ls(directory, detail=False) if name.endswith(suffix))

    def get_logs_path(self, run_id):
        return posixpath.join(self.get_run_path(run_id), self.get_logs_subdir()) if self._save_runs else None

    def get_checkpoint_filename(self):
        return self.checkpoint_filename

    def get_logs_subdir(self):
        return "logs"

    def _get_full_path_or_default(self, path, default_key):
        if path is not None:
            return self.get_full_path(path)
        return posixpath.join(self.prefix_path, default_key)

    def get_local_output_dir_fn(self, run_id):
        @contextlib.contextmanager
        def local_run_path():
            with tempfile.TemporaryDirectory(prefix="horovod_rs-run-") as tmpdir:
                yield tmpdir

        return local_run_path

    def sync_fn(self, run_id):
        """A function that copies a rank's local run directory into ``runs/<run_id>``, each file
        atomically (but ``exclude``, a file name); files that did not change since the last call
        are skipped."""
        run_path = self.get_run_path(run_id)
        store = self
        uploaded = {}

        def sync(local_run_path, exclude=None):
            for directory, _, files in os.walk(local_run_path):
                relative = os.path.relpath(directory, local_run_path)
                for name in files:
                    if name == exclude:
                        continue
                    local = os.path.join(directory, name)
                    stamp = os.stat(local).st_mtime_ns, os.stat(local).st_size
                    if uploaded.get(local) == stamp:
                        continue
                    target = posixpath.normpath(posixpath.join(run_path, relative, name))
                    with open(local, "rb") as f:
                        store.write(target, f.read())
                    uploaded[local] = stamp

        return sync

    def get_localized_path(self, path):
        raise NotImplementedError()

    def get_full_path(self, path):
        raise NotImplementedError()

    def get_full_path_fn(self):
        raise NotImplementedError()

    @property
    def fs(self):
        raise NotImplementedError()


class FilesystemStore(AbstractFilesystemStore):
    """A store on any filesystem fsspec knows (``file://``, ``s3://``, ``gs://``, ``abfs://``, ...);
    a path without a scheme is a local directory."""

    def __init__(self, prefix_path, *args, **kwargs):
        self.storage_options = kwargs.get("storage_options") or {}
        self.protocol, _ = _split_protocol(self.get_full_path(prefix_path))
        self._fs = None
        known = ("train_path", "val_path", "test_path", "runs_path", "save_runs", "storage_options",
                 "checkpoint_filename")
        super().__init__(prefix_path, *args, **{k: v for k, v in kwargs.items() if k in known})

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fs"] = None  # filesystem clients do not travel; each process opens its own
        return state

    @property
    def fs(self):
        if self._fs is None:
            fsspec = _fsspec()
            cls = fsspec.get_filesystem_class(self.protocol or "file")
            options = cls._get_kwargs_from_urls(self.prefix_path)
            options.update(self.storage_options or {})
            self._fs = cls(**options)
        return self._fs

    def get_filesystem(self):
        return self.fs

    def get_localized_path(self, path):
        return _split_protocol(path)[1] if self.protocol not in (None, "file") else _local_path(path)

    def get_full_path(self, path):
        return self.get_full_path_fn()(path)

    def get_full_path_fn(self):
        def full_path(path):
            if _split_protocol(path)[0] is not None:
                return path
            return pathlib.Path(os.path.abspath(path)).as_uri()

        return full_path

    @classmethod
    def matches(cls, path):
        return True


def _local_path(path):
    protocol, rest = _split_protocol(path)
    if protocol == "file":
        return "/" + rest.lstrip("/")
    return path[len("file:"):] if path.startswith("file:/") else path


class LocalStore(FilesystemStore):
    """The local filesystem (Horovod keeps this name as an alias of FilesystemStore)."""


class HDFSStore(FilesystemStore):
    """HDFS through pyarrow's HadoopFileSystem (needs libhdfs and a Hadoop client configuration, as
    Horovod's). ``prefix_path``: ``hdfs://namenode:8020/path``, ``hdfs:///path`` or ``/path``."""

    FS_PREFIX = "hdfs://"
    URL_PATTERN = r"^(?:(.+://))?(?:([^/:]+))?(?:[:]([0-9]+))?(?:(.+))?$"

    def __init__(self, prefix_path, host=None, port=None, user=None, kerb_ticket=None, driver="libhdfs",
                 extra_conf=None, *args, **kwargs):
        prefix, url_host, url_port, path, offset = self.parse_url(prefix_path)
        if prefix is not None and prefix != self.FS_PREFIX:
            raise ValueError("Mismatched HDFS namespace for URL: %s. Found %s but expected %s"
                             % (prefix_path, prefix, self.FS_PREFIX))
        if not path:
            raise ValueError("Failed to parse path from URL: %s" % prefix_path)
        self._url_prefix = prefix_path[:offset] if prefix else self.FS_PREFIX
        self._hdfs_kwargs = dict(host=host or url_host or "default", port=port or url_port or 0, user=user,
                                 kerb_ticket=kerb_ticket, extra_conf=extra_conf)
        super().__init__(prefix_path, *args, **kwargs)

    def parse_url(self, url):
        match = re.search(self.URL_PATTERN, url)
        port = match.group(3)
        return match.group(1), match.group(2), int(port) if port is not None else None, match.group(4), \
            match.start(4)

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self._get_filesystem_fn()()
        return self._fs

    def _get_filesystem_fn(self):
        """A function that connects to this store's HDFS (Horovod's name, which tests patch)."""
        options = {k: v for k, v in self._hdfs_kwargs.items() if v is not None}

        def connect():
            from fsspec.implementations.arrow import HadoopFileSystem

            return HadoopFileSystem(**options)

        return connect

    def get_full_path(self, path):
        return path if self.matches(path) else self._url_prefix + path

    def get_full_path_fn(self):
        prefix = self._url_prefix
        return lambda path: path if path.startswith(HDFSStore.FS_PREFIX) else prefix + path

    def get_localized_path(self, path):
        return path[len(self._url_prefix):] if path.startswith(self._url_prefix) else path

    @classmethod
    def matches(cls, path):
        return path.startswith(cls.FS_PREFIX)


class DBFSLocalStore(FilesystemStore):
    """Databricks File System through its local mount ``/dbfs``: ``prefix_path`` is ``/dbfs/...``,
    ``dbfs:/...``, ``file:/dbfs/...`` or ``file:///dbfs/...``."""

    DBFS_PATH_FORMAT_ERROR = ("The provided path is not a DBFS path: {}, Please provide a path starting with "
                              "`/dbfs/...` or `dbfs:/...` or `file:/dbfs/...` or `file:///dbfs/...`.")

    def __init__(self, prefix_path, *args, **kwargs):
        super().__init__(self.normalize_path(prefix_path), *args, **kwargs)

    @classmethod
    def matches_dbfs(cls, path):
        return (path.startswith("dbfs:/") and not path.startswith("dbfs://")) or path.startswith("/dbfs/") \
            or path.startswith("file:///dbfs/") or path.startswith("file:/dbfs/")

    @staticmethod
    def normalize_path(path):
        """The path as ``/dbfs/...``."""
        if path.startswith("dbfs:/") and not path.startswith("dbfs://"):
            return "/dbfs" + path[5:]
        if path.startswith("/dbfs/"):
            return path
        if path.startswith("file:///dbfs/"):
            return path[7:]
        if path.startswith("file:/dbfs/"):
            return path[5:]
        raise ValueError(DBFSLocalStore.DBFS_PATH_FORMAT_ERROR.format(path))

    def get_localized_path(self, path):
        return DBFSLocalStore.normalize_path(path) if self.matches_dbfs(path) else path

    def get_full_path(self, path):
        return "file://" + DBFSLocalStore.normalize_path(path)

    def get_checkpoint_filename(self):
        return "checkpoint.tf"
