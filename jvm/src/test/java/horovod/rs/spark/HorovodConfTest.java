package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.junit.Test;

public class HorovodConfTest {
    /** Options from {@code conf} on a driver whose environment sets none of Horovod's variables. */
    private static HorovodRunOptions options(SparkConf conf) {
        return HorovodRunOptions.fromConf(conf, Map.of());
    }

    @Test
    public void defaultsApplyWhenNothingIsSet() {
        HorovodRunOptions options = options(new SparkConf(false));
        assertEquals(Duration.ofSeconds(600), options.startTimeout());
        assertEquals(Duration.ofSeconds(120), options.connectTimeout());
        assertEquals(Duration.ofSeconds(600), options.collectiveTimeout());
        assertEquals(0.0, options.gpusPerRank(), 0.0);
        assertTrue(options.driverRendezvous());
        assertTrue(options.hierarchicalAllreduce());
        assertFalse(options.tls());
        assertEquals(128L << 20, options.fusionThresholdBytes());
        assertEquals(Duration.ofMillis(1), options.cycleTime());
        assertEquals(Duration.ofSeconds(60), options.stallWarning());
        assertEquals(1024, options.cacheCapacity());
        assertEquals(1, options.maxAttempts());
        assertEquals(3, (int) HorovodConf.FIT_ATTEMPTS.get(new SparkConf(false)));
    }

    @Test
    public void theStallTimeoutDefaultsToFourFifthsOfTheCollectiveTimeout() {
        assertEquals(Duration.ofSeconds(480), options(new SparkConf(false)).stallTimeout());
        HorovodRunOptions options = options(new SparkConf(false).set("spark.horovod.rs.collectiveTimeout", "100s"));
        assertEquals(Duration.ofSeconds(80), options.stallTimeout());
        assertEquals(Duration.ofSeconds(8), options.withCollectiveTimeout(Duration.ofSeconds(10)).stallTimeout());
        assertEquals(Duration.ofSeconds(3), options.withStallTimeout(Duration.ofSeconds(3)).stallTimeout());
        assertEquals("0.8 × collectiveTimeout", HorovodConf.STALL_TIMEOUT_MS.defaultValue());
    }

    @Test
    public void sparkFormatsAreUnderstood() {
        SparkConf conf = new SparkConf(false)
                .set("spark.horovod.rs.startTimeout", "2min")
                .set("spark.horovod.rs.fusionThreshold", "64m")
                .set("spark.horovod.rs.cycleTime", "5")
                .set("spark.horovod.rs.driverRendezvous", "false");
        HorovodRunOptions options = options(conf);
        assertEquals(Duration.ofMinutes(2), options.startTimeout());
        assertEquals(64L << 20, options.fusionThresholdBytes());
        assertEquals(Duration.ofMillis(5), options.cycleTime());
        assertFalse(options.driverRendezvous());
        assertTrue(options(conf.clone().set("spark.horovod.rs.driverRendezvous", "auto")).driverRendezvous());
    }

    @Test
    public void onlyTheSettingsGivenTravelInTheRankSpec() {
        assertEquals("{\"rank\":1,\"size\":2,\"rendezvous\":{\"service\":{\"address\":\"driver:7\","
                + "\"host\":\"exec\\\"1\",\"attempt\":3}}}",
                RankSpec.throughService(1, 2, "driver:7", "exec\"1", 3, options(new SparkConf(false))));
        SparkConf conf = new SparkConf(false)
                .set("spark.horovod.rs.fusionThreshold", "64m")
                .set("spark.horovod.rs.stallWarning", "0s")
                .set("spark.horovod.rs.tls", "true");
        HorovodRunOptions options = options(conf).withCycleTime(Duration.ofMillis(5));
        assertSameJson("{\"rank\":0,\"size\":1,\"rendezvous\":{\"entries\":[\"a:1\"]},\"tls\":true,"
                + "\"engine\":{\"fusion_threshold_bytes\":67108864,\"cycle_time_ms\":5,\"stall_warning_ms\":0}}",
                RankSpec.withEntries(0, List.of("a:1"), options));
    }

    @Test
    public void horovodsVariablesOfTheDriverTravelAndAKeyWinsOverThem() {
        SparkConf conf = new SparkConf(false).set("spark.horovod.rs.tls", "false");
        HorovodRunOptions options = HorovodRunOptions.fromConf(conf,
                Map.of("HOROVOD_RS_TLS", "1", "HOROVOD_CACHE_CAPACITY", "7", "HOROVOD_SPARK_START_TIMEOUT", "30",
                        "PATH", "/bin"));
        assertFalse(options.tls());
        assertEquals(7, options.cacheCapacity());
        assertEquals(Duration.ofSeconds(30), options.startTimeout());
        assertSameJson("{\"rank\":0,\"size\":1,\"rendezvous\":{\"entries\":[\"a:1\"]},\"tls\":false,"
                + "\"engine\":{\"cache_capacity\":7}}", RankSpec.withEntries(0, List.of("a:1"), options));
    }

    /** The same JSON, whatever the order of each object's fields. */
    private static void assertSameJson(String expected, String actual) {
        assertEquals(NativeSettings.parse(expected), NativeSettings.parse(actual));
    }

    @Test
    public void aBadValueNamesItsKeyOrVariable() {
        assertRefused(() -> options(new SparkConf(false).set("spark.horovod.rs.driverRendezvous", "yes please")),
                "invalid argument: spark.horovod.rs.driverRendezvous=\"yes please\": expected auto, true or false");
        assertRefused(() -> options(new SparkConf(false)).withConnectTimeout(Duration.ZERO),
                "invalid argument: spark.horovod.rs.connectTimeout=\"0ms\": expected a positive time");
        assertRefused(() -> options(new SparkConf(false)).withGpusPerRank(-1),
                "invalid argument: spark.horovod.rs.gpusPerRank=\"-1.0\": expected a non-negative number");
        assertRefused(() -> HorovodRunOptions.fromConf(new SparkConf(false), Map.of("HOROVOD_CYCLE_TIME", "soon")),
                "invalid argument: HOROVOD_CYCLE_TIME=\"soon\": expected a number of milliseconds");
        assertRefused(() -> HorovodConf.FIT_ATTEMPTS.get(new SparkConf(false).set("spark.horovod.rs.fitAttempts", "0")),
                "invalid argument: spark.horovod.rs.fitAttempts=\"0\": expected a whole number of at least 1");
        assertRefused(() -> options(new SparkConf(false)).withMaxAttempts(0), "maxAttempts must be at least 1, got 0");
    }

    private static void assertRefused(Runnable build, String messageStart) {
        try {
            build.run();
            fail("expected a refusal starting with: " + messageStart);
        } catch (IllegalArgumentException e) {
            assertTrue(e.getMessage(), e.getMessage().startsWith(messageStart));
        }
    }

    @Test
    public void everyKeyIsTheNativeTables() {
        assertEquals(List.copyOf(NativeSettings.rows().keySet()),
                HorovodConf.ALL.stream().map(HorovodConf::key).toList());
        assertEquals("HOROVOD_SPARK_START_TIMEOUT", HorovodConf.START_TIMEOUT_MS.variable());
        assertEquals(null, HorovodConf.FIT_ATTEMPTS.variable());
        assertEquals("128m", HorovodConf.FUSION_THRESHOLD_BYTES.defaultValue());
        assertEquals("GPUs requested for each rank's task; 0 runs on CPUs only.", HorovodConf.GPUS_PER_RANK.doc());
    }

    @Test
    public void optionsTravelToTheTasksIntact() throws Exception {
        HorovodRunOptions options = options(new SparkConf(false).set("spark.horovod.rs.collectiveTimeout", "10s"))
                .withTls(true).withMaxAttempts(2);
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
            out.writeObject(options);
        }
        HorovodRunOptions copy;
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
            copy = (HorovodRunOptions) in.readObject();
        }
        assertEquals(RankSpec.withEntries(0, List.of("a:1"), options), RankSpec.withEntries(0, List.of("a:1"), copy));
        assertEquals(Duration.ofSeconds(8), copy.stallTimeout());
        assertEquals(2, copy.maxAttempts());
    }
}
