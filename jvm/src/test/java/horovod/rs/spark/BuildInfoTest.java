package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;

import java.util.List;
import org.junit.Test;

public class BuildInfoTest {
    private static final List<String> LINES = List.of("spark3.5_2.12", "spark3.5_2.13", "spark4_2.13");
    private static final BuildInfo SPARK35_212 = new BuildInfo("spark3.5_2.12", "3.5", "2.12", "0.1.0", LINES);
    private static final BuildInfo SPARK4_213 = new BuildInfo("spark4_2.13", "4", "2.13", "0.1.0", LINES);

    @Test
    public void aLineRunsOnItsSparkReleasesAndScala() {
        SPARK35_212.requireRunsOn("3.5.0", "2.12.18");
        SPARK35_212.requireRunsOn("3.5.9", "2.12.15");
        SPARK4_213.requireRunsOn("4.0.4", "2.13.16");
        SPARK4_213.requireRunsOn("4.3.0", "2.13.18");
    }

    @Test
    public void anotherSparkOrScalaNamesTheJarToUse() {
        HorovodException spark = assertThrows(HorovodException.class,
                () -> SPARK4_213.requireRunsOn("3.5.1", "2.12.18"));
        assertEquals("horovod-rs-spark4_2.13 is built for Spark 4.x with Scala 2.13, but this Spark is 3.5.1 with "
                + "Scala 2.12.18: use the jar horovod-rs-spark3.5_2.12 (docs/install.md lists the lines)",
                spark.getMessage());
        HorovodException scala = assertThrows(HorovodException.class,
                () -> SPARK35_212.requireRunsOn("3.5.2", "2.13.8"));
        assertEquals("horovod-rs-spark3.5_2.12 is built for Spark 3.5.x with Scala 2.12, but this Spark is 3.5.2 "
                + "with Scala 2.13.8: use the jar horovod-rs-spark3.5_2.13 (docs/install.md lists the lines)",
                scala.getMessage());
        assertThrows(HorovodException.class, () -> SPARK35_212.requireRunsOn("3.50.0", "2.12.17"));
    }

    @Test
    public void aSparkWithoutAJarIsSaidToHaveNone() {
        HorovodException old = assertThrows(HorovodException.class,
                () -> SPARK35_212.requireRunsOn("3.4.1", "2.12.17"));
        assertEquals("horovod-rs-spark3.5_2.12 is built for Spark 3.5.x with Scala 2.12, but this Spark is 3.4.1 "
                + "with Scala 2.12.17: horovod-rs has no jar for it, only for spark3.5_2.12, spark3.5_2.13, "
                + "spark4_2.13 (docs/install.md lists the lines)", old.getMessage());
    }

    /** The build wrote build.properties for the line whose Scala library these tests run on. */
    @Test
    public void theBuiltJarKnowsItsLine() {
        BuildInfo current = BuildInfo.current();
        assertEquals("spark" + current.runsOn() + "_" + current.scalaBinary(), current.line());
        assertEquals(List.of("spark3.5_2.12", "spark3.5_2.13", "spark4_2.13"), current.lines());
        current.requireRunsOn(current.runsOn() + ".0", scala.util.Properties.versionNumberString());
    }
}
