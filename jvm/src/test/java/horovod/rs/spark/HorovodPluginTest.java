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
        assertEquals("horovod-rs needs Java 17 or newer, but this JVM is Java 1.8 (1.8.0_412 in /usr/lib/jvm/zulu8). "
                + "Run Spark on Java 17 or newer: set JAVA_HOME for spark-submit, or on Databricks Runtime 15.4 LTS "
                + "the cluster's environment variable JNAME=zulu17-ca-amd64 (docs/databricks.md).",
                HorovodPlugin.tooOld("1.8", "1.8.0_412", "/usr/lib/jvm/zulu8"));
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
