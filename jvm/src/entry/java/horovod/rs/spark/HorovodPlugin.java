package horovod.rs.spark;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * The Spark plugin, enabled with {@code spark.plugins=horovod.rs.spark.HorovodPlugin}: loads the
 * native engine once in every executor as it starts, so that a missing or broken library fails
 * the executor at start with a reason rather than the first training job, and checks on the
 * driver that the cluster runs the Spark and Scala this jar was built for.
 *
 * <p>This class is compiled for Java 8 (jvm/src/entry) in every line: the rest of the jar targets
 * the line's Java (8 for Spark 3.5, 17 for Spark 4, build.gradle), and a JVM older than that would
 * otherwise fail on a class file version. Here it is told what it needs.
 */
public final class HorovodPlugin implements SparkPlugin {
    /** The Java release the rest of the jar is compiled for (build.properties' {@code java}). */
    static final int REQUIRED_JAVA = requiredJava();

    public HorovodPlugin() {
        String running = System.getProperty("java.specification.version", "unknown");
        if (javaRelease(running) < REQUIRED_JAVA) {
            throw new UnsupportedClassVersionError(tooOld(REQUIRED_JAVA, running, System.getProperty("java.version", "?"),
                    System.getProperty("java.home", "?")));
        }
    }

    private static int requiredJava() {
        Properties build = new Properties();
        try (InputStream in = HorovodPlugin.class.getResourceAsStream("build.properties")) {
            if (in != null) {
                build.load(in);
            }
        } catch (IOException e) {
            // Unreadable: assume the newest target; BuildInfo reports the broken jar when the driver starts.
        }
        return Integer.parseInt(build.getProperty("java", "17"));
    }

    /** The release number of a {@code java.specification.version}: "1.8" is 8, "17" is 17; 0 if unreadable. */
    static int javaRelease(String specificationVersion) {
        String release = specificationVersion.startsWith("1.") ? specificationVersion.substring(2) : specificationVersion;
        int end = 0;
        while (end < release.length() && Character.isDigit(release.charAt(end))) {
            end++;
        }
        return end == 0 ? 0 : Integer.parseInt(release.substring(0, end));
    }

    static String tooOld(int required, String specificationVersion, String javaVersion, String javaHome) {
        return "horovod-rs needs Java " + required + " or newer, but this JVM is Java " + specificationVersion
                + " (" + javaVersion + " in " + javaHome + "). Run Spark on Java " + required + " or newer "
                + "(set JAVA_HOME for spark-submit), or use the jar of a Spark line built for this Java: "
                + "the Spark 3.5 jars run on Java 8 (docs/install.md).";
    }

    @Override
    public DriverPlugin driverPlugin() {
        return new HorovodDriverPlugin();
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new HorovodExecutorPlugin();
    }
}
