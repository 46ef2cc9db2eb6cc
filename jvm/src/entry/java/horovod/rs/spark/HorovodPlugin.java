package horovod.rs.spark;

import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * The Spark plugin, enabled with {@code spark.plugins=horovod.rs.spark.HorovodPlugin}: loads the
 * native engine once in every executor as it starts, so that a missing or broken library fails
 * the executor at start with a reason rather than the first training job, and checks on the
 * driver that the cluster runs the Spark and Scala this jar was built for.
 *
 * <p>This class alone is compiled for Java 8 (jvm/src/entry): the rest of the jar needs Java 17,
 * and an older JVM, which Spark 3.5 still runs on, would otherwise fail on a class file version.
 * Here it is told what it needs.
 */
public final class HorovodPlugin implements SparkPlugin {
    /** The Java release the rest of the jar is compiled for. */
    static final int REQUIRED_JAVA = 17;

    public HorovodPlugin() {
        String running = System.getProperty("java.specification.version", "unknown");
        if (javaRelease(running) < REQUIRED_JAVA) {
            throw new UnsupportedClassVersionError(tooOld(running, System.getProperty("java.version", "?"),
                    System.getProperty("java.home", "?")));
        }
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

    static String tooOld(String specificationVersion, String javaVersion, String javaHome) {
        return "horovod-rs needs Java " + REQUIRED_JAVA + " or newer, but this JVM is Java " + specificationVersion
                + " (" + javaVersion + " in " + javaHome + "). Run Spark on Java " + REQUIRED_JAVA + " or newer: "
                + "set JAVA_HOME for spark-submit, or on Databricks Runtime 15.4 LTS the cluster's environment "
                + "variable JNAME=zulu17-ca-amd64 (docs/databricks.md).";
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
