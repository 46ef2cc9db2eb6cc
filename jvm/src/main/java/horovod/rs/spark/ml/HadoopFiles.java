package horovod.rs.spark.ml;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.IOUtils;

/** Whole files through Hadoop's FileSystem, resolved as Spark ML resolves its save paths. */
final class HadoopFiles {
    private HadoopFiles() {}

    static void write(Configuration conf, String path, byte[] bytes) {
        Path target = new Path(path);
        try {
            FileSystem fs = target.getFileSystem(conf);
            try (OutputStream out = fs.create(target, true)) {
                out.write(bytes);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("could not write " + path + ": " + e.getMessage(), e);
        }
    }

    static byte[] read(Configuration conf, String path) {
        Path source = new Path(path);
        try (InputStream in = source.getFileSystem(conf).open(source)) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            IOUtils.copyBytes(in, out, 65536, false);
            return out.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException("could not read " + path + ": " + e.getMessage(), e);
        }
    }
}
