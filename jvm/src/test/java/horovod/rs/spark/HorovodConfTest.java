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
    public void engineKnobsTravelAsOneConfigText() {
        assertEquals("cycle_time_ms=1\nfusion_threshold_bytes=134217728\nstall_warning_ms=60000\n"
                + "stall_timeout_ms=600000\n", HorovodRunOptions.fromConf(new SparkConf(false)).engineConfig());
        SparkConf conf = new SparkConf(false)
                .set("spark.horovod.rs.fusionThreshold", "64m")
                .set("spark.horovod.rs.cycleTime", "5ms")
                .set("spark.horovod.rs.stallWarning", "0s")
                .set("spark.horovod.rs.stallTimeout", "2min");
        HorovodRunOptions options = HorovodRunOptions.fromConf(conf);
        assertEquals(64L << 20, options.fusionThresholdBytes());
        assertEquals("cycle_time_ms=5\nfusion_threshold_bytes=67108864\nstall_warning_ms=0\n"
                + "stall_timeout_ms=120000\n", options.engineConfig());
        assertEquals(Duration.ofSeconds(3), options.withStallTimeout(Duration.ofSeconds(3)).stallTimeout());
        assertEquals(Duration.ofMinutes(2), options.stallTimeout());
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
