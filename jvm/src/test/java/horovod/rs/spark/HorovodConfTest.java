package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

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
    public void engineKnobsTravelInTheRankSpec() {
        assertEquals("{\"rank\":1,\"size\":2,\"rendezvous\":{\"service\":{\"address\":\"driver:7\","
                + "\"host\":\"exec\\\"1\",\"attempt\":3}},\"connect_timeout_ms\":120000,"
                + "\"collective_timeout_ms\":600000,\"engine\":{\"cycle_time_ms\":1,"
                + "\"fusion_threshold_bytes\":134217728,\"stall_warning_ms\":60000,\"stall_timeout_ms\":600000}}",
                RankSpec.throughService(1, 2, "driver:7", "exec\"1", 3,
                        HorovodRunOptions.fromConf(new SparkConf(false))));
        SparkConf conf = new SparkConf(false)
                .set("spark.horovod.rs.fusionThreshold", "64m")
                .set("spark.horovod.rs.cycleTime", "5ms")
                .set("spark.horovod.rs.stallWarning", "0s")
                .set("spark.horovod.rs.stallTimeout", "2min");
        HorovodRunOptions options = HorovodRunOptions.fromConf(conf);
        assertEquals(64L << 20, options.fusionThresholdBytes());
        assertTrue(RankSpec.withEntries(0, java.util.List.of("a:1"), options).endsWith(
                "\"rendezvous\":{\"entries\":[\"a:1\"]},\"connect_timeout_ms\":120000,"
                + "\"collective_timeout_ms\":600000,\"engine\":{\"cycle_time_ms\":5,"
                + "\"fusion_threshold_bytes\":67108864,\"stall_warning_ms\":0,\"stall_timeout_ms\":120000}}"));
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
}
