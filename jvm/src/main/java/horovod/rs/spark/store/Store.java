package horovod.rs.spark.store;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.Objects;
import java.util.Optional;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.IOUtils;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Where a training run lives: its checkpoint, final model and history, under any Hadoop
 * FileSystem URI ({@code file:}, {@code hdfs:}, {@code s3a:}, {@code dbfs:}). A path such as
 * {@code /dbfs/...} is taken as a local path, as Horovod's DBFSLocalStore does on Databricks,
 * where {@code /dbfs} is the FUSE mount every node sees.
 *
 * <p>Layout: {@code <root>/runs/<runId>/{checkpoint.bin, model.bin, history.json}}.
 *
 * <p>Writes are atomic for readers: bytes go to a temporary file in the same directory, which is
 * then renamed over the target, so a reader (a resuming run, the driver showing progress) sees
 * the old file or the new one, never half of one. The Hadoop configuration travels with the
 * store, so executors reach the same file system with the driver's credentials and settings.
 */
public final class Store implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The run's latest checkpoint: everything a new fit with the same run id resumes from. */
    public static final String CHECKPOINT = "checkpoint.bin";
    /** The run's final model weights. */
    public static final String MODEL = "model.bin";
    /** The run's per-epoch metrics, as JSON, rewritten after every epoch. */
    public static final String HISTORY = "history.json";

    private final String root;
    private final SerializableConfiguration hadoopConf;

    private Store(String root, Configuration hadoopConf) {
        this.root = root;
        this.hadoopConf = new SerializableConfiguration(hadoopConf);
    }

    /** The store at {@code uri}; {@code /dbfs/...} and other bare paths are local paths. */
    public static Store create(String uri, Configuration hadoopConf) {
        Objects.requireNonNull(uri, "the store URI must not be null");
        Objects.requireNonNull(hadoopConf, "the Hadoop configuration must not be null");
        String trimmed = uri.trim();
        if (trimmed.isEmpty()) {
            throw new IllegalArgumentException("the store URI is empty");
        }
        String root = trimmed.startsWith("/") ? "file:" + trimmed : trimmed;
        Store store = new Store(root.endsWith("/") ? root.substring(0, root.length() - 1) : root, hadoopConf);
        store.fileSystem(new Path(store.root)); // fails now, naming the URI, if no file system serves it
        return store;
    }

    /** The root URI, as used for paths. */
    public String root() {
        return root;
    }

    /** The directory of run {@code runId}. */
    public String runPath(String runId) {
        checkRunId(runId);
        return root + "/runs/" + runId;
    }

    /** The file {@code name} of run {@code runId}. */
    public String runFile(String runId, String name) {
        return runPath(runId) + "/" + name;
    }

    /** Writes {@code bytes} to {@code path} atomically (temporary file, then rename). */
    public void write(String path, byte[] bytes) {
        Path target = new Path(path);
        FileSystem fs = fileSystem(target);
        Path temp = new Path(target.getParent(), "." + target.getName() + ".tmp-" + UUID.randomUUID());
        try {
            fs.mkdirs(target.getParent());
            try (OutputStream out = fs.create(temp, true)) {
                out.write(bytes);
            }
            // HDFS's rename does not replace an existing file; delete it first there. A reader
            // between the two calls sees no file, never a partial one.
            if (!fs.rename(temp, target)) {
                fs.delete(target, false);
                if (!fs.rename(temp, target)) {
                    throw new IOException("could not rename " + temp + " to " + target);
                }
            }
        } catch (IOException e) {
            deleteQuietly(fs, temp);
            throw new UncheckedIOException("could not write " + path + ": " + e.getMessage(), e);
        }
    }

    /** The bytes at {@code path}, or empty when there is no such file. */
    public Optional<byte[]> read(String path) {
        Path source = new Path(path);
        FileSystem fs = fileSystem(source);
        try {
            if (!fs.exists(source)) {
                return Optional.empty();
            }
            try (InputStream in = fs.open(source)) {
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                IOUtils.copyBytes(in, out, 65536, false);
                return Optional.of(out.toByteArray());
            }
        } catch (IOException e) {
            throw new UncheckedIOException("could not read " + path + ": " + e.getMessage(), e);
        }
    }

    /** Whether {@code path} exists. */
    public boolean exists(String path) {
        Path p = new Path(path);
        try {
            return fileSystem(p).exists(p);
        } catch (IOException e) {
            throw new UncheckedIOException("could not look up " + path + ": " + e.getMessage(), e);
        }
    }

    /** Deletes the file at {@code path}, if there is one. */
    public void delete(String path) {
        Path p = new Path(path);
        try {
            fileSystem(p).delete(p, false);
        } catch (IOException e) {
            throw new UncheckedIOException("could not delete " + path + ": " + e.getMessage(), e);
        }
    }

    private FileSystem fileSystem(Path path) {
        try {
            return path.getFileSystem(hadoopConf.value());
        } catch (IOException e) {
            throw new IllegalArgumentException("no file system for store path " + path + ": " + e.getMessage(), e);
        }
    }

    private static void deleteQuietly(FileSystem fs, Path path) {
        try {
            fs.delete(path, false);
        } catch (IOException ignored) {
            // The write already failed; that error is the one to report.
        }
    }

    private static void checkRunId(String runId) {
        if (runId == null || runId.isEmpty() || !runId.matches("[A-Za-z0-9._-]+") || runId.startsWith(".")) {
            throw new IllegalArgumentException("run id '" + runId + "' must be letters, digits, '.', '_' or '-',"
                    + " not starting with '.'");
        }
    }

    @Override
    public String toString() {
        return "Store(" + root + ")";
    }
}
