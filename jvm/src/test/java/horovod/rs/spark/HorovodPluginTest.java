package horovod.rs.spark;

import static org.junit.Assert.assertEquals;

import java.io.IOException;
import java.io.InputStream;
import org.junit.Test;

public class HorovodPluginTest {
    @Test
    public void javaReleasesReadOldAndNewVersionStrings() {
        assertEquals(8, HorovodPlugin.javaRelease("1.8"));
        assertEquals(11, HorovodPlugin.javaRelease("11"));
        assertEquals(17, HorovodPlugin.javaRelease("17"));
        assertEquals(25, HorovodPlugin.javaRelease("25"));
        assertEquals(0, HorovodPlugin.javaRelease("unknown"));
    }

    @Test
    public void anOldJavaIsToldWhatItNeeds() {
        assertEquals("horovod-rs needs Java 17 or newer, but this JVM is Java 11 (11.0.24 in /usr/lib/jvm/zulu11). "
                + "Run Spark on Java 17 or newer (set JAVA_HOME for spark-submit), or use the jar of a Spark line "
                + "built for this Java: the Spark 3.5 jars run on Java 8 (docs/install.md).",
                HorovodPlugin.tooOld(17, "11", "11.0.24", "/usr/lib/jvm/zulu11"));
    }

    /** The plugin asks for the Java the line's classes target: 8 on Spark 3.5, 17 on Spark 4. */
    @Test
    public void theRequiredJavaIsTheLinesTarget() {
        assertEquals(BuildInfo.current().line().startsWith("spark3.5") ? 8 : 17, HorovodPlugin.REQUIRED_JAVA);
    }

    /** Java 8 reads class files up to version 52: the plugin's must be one, or it never gets to say the above. */
    @Test
    public void thePluginClassLoadsOnJava8() throws IOException {
        try (InputStream in = HorovodPlugin.class.getResourceAsStream("HorovodPlugin.class")) {
            byte[] header = in.readNBytes(8);
            assertEquals(52, ((header[6] & 0xff) << 8) | (header[7] & 0xff));
        }
    }
}
