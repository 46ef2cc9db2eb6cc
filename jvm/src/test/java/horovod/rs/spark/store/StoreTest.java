package horovod.rs.spark.store;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.assertThrows;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import org.apache.hadoop.conf.Configuration;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

public class StoreTest {
    @Rule
    public TemporaryFolder dir = new TemporaryFolder();

    @Test
    public void writesReadsAndReplacesRunFiles() throws Exception {
        Store store = Store.create(dir.getRoot().toURI().toString(), new Configuration());
        String path = store.runFile("run-1", Store.CHECKPOINT);
        assertFalse(store.read(path).isPresent());

        store.write(path, "first".getBytes(StandardCharsets.UTF_8));
        store.write(path, "second".getBytes(StandardCharsets.UTF_8));

        assertArrayEquals("second".getBytes(StandardCharsets.UTF_8), store.read(path).get());
        File runDir = new File(dir.getRoot(), "runs/run-1");
        String[] left = runDir.list((d, name) -> name.contains(".tmp-"));
        assertEquals("no temporary files remain: " + Arrays.toString(left), 0, left.length);
    }

    @Test
    public void bareAbsolutePathsAreLocalLikeDbfsMounts() throws Exception {
        Store store = Store.create(dir.getRoot().getAbsolutePath() + "/", new Configuration());
        assertTrue(store.root().startsWith("file:/"));
        store.write(store.runFile("r", Store.HISTORY), new byte[] {1, 2});
        assertArrayEquals(new byte[] {1, 2}, Files.readAllBytes(dir.getRoot().toPath().resolve("runs/r/history.json")));
    }

    @Test
    public void rejectsRunIdsThatWouldEscapeTheRunDirectory() {
        Store store = Store.create(dir.getRoot().getAbsolutePath(), new Configuration());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> store.runPath("../x"));
        assertTrue(e.getMessage(), e.getMessage().contains("run id '../x'"));
    }

    @Test
    public void unknownSchemeIsNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Store.create("nosuchfs://bucket/runs", new Configuration()));
        assertTrue(e.getMessage(), e.getMessage().contains("nosuchfs://bucket/runs"));
    }
}
