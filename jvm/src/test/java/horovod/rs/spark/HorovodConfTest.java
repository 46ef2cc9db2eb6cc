package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.apache.spark.SparkConf;
import org.junit.Test;

public class HorovodConfTest {
    @Test
    public void defaultsApplyWhenNothingIsSet() {
        HorovodRunOptions options = HorovodRunOptions.fromConf(new SparkConf(false));
        assertEquals(Duration.ofSeconds(600), options.startTimeout());
        assertEquals(Duration.ofSeconds(120), options.connectTimeout());
        assertEquals(Duration.ofSeconds(600), options.collectiveTimeout());
        assertEquals(0.0, options.gpusPerRank(), 0.0);
        assertTrue(options.driverRendezvous());
    }

    @Test
    public void sparkTimeSuffixesAreUnderstood() {
        SparkConf conf = new SparkConf(false)
                .set("spark.horovod.rs.startTimeout", "2min")
                .set("spark.horovod.rs.driverRendezvous", "false");
        HorovodRunOptions options = HorovodRunOptions.fromConf(conf);
        assertEquals(Duration.ofMinutes(2), options.startTimeout());
        assertFalse(options.driverRendezvous());
    }

    @Test
    public void aBadValueNamesItsKey() {
        SparkConf conf = new SparkConf(false).set("spark.horovod.rs.driverRendezvous", "yes please");
        try {
            HorovodRunOptions.fromConf(conf);
            fail("a non-boolean must be rejected");
        } catch (IllegalArgumentException e) {
            assertTrue(e.getMessage(), e.getMessage().startsWith("invalid value for spark.horovod.rs.driverRendezvous: yes please"));
        }
    }

    @Test
    public void everyKeyIsDocumentedWithItsDefault() throws Exception {
        String guide = Files.readString(Path.of("docs/user-guide.md"));
        for (HorovodConf<?> key : HorovodConf.ALL) {
            String row = "| `" + key.key() + "` | `" + key.defaultValue() + "` | " + key.doc() + " |";
            assertTrue("docs/user-guide.md lacks the row:\n" + row, guide.contains(row));
        }
    }
}
