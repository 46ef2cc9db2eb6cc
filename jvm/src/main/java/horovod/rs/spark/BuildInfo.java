package horovod.rs.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import org.apache.spark.SparkContext;

/**
 * What this jar was built for, as build.gradle wrote it into {@code build.properties}: its Spark
 * line (e.g. {@code spark3.5_2.12}), the Spark releases it runs on, its Scala binary version, and
 * every line horovod-rs has a jar for. A jar of another line fails in the middle of a job with a
 * missing method; the driver checks first ({@link #requireRunsOn}) and names the jar to use
 * instead, or says that there is none for this Spark.
 */
final class BuildInfo {
    private static final BuildInfo CURRENT = read();

    private final String line;
    private final String runsOn;
    private final String scalaBinary;
    private final String version;
    private final List<String> lines;

    BuildInfo(String line, String runsOn, String scalaBinary, String version, List<String> lines) {
        this.line = line;
        this.runsOn = runsOn;
        this.scalaBinary = scalaBinary;
        this.version = version;
        this.lines = Lists.copyOf(lines);
    }

    String line() {
        return line;
    }

    String runsOn() {
        return runsOn;
    }

    String scalaBinary() {
        return scalaBinary;
    }

    String version() {
        return version;
    }

    /** Every line horovod-rs builds a jar for, e.g. spark4_2.13. */
    List<String> lines() {
        return lines;
    }

    /** This jar's build. */
    static BuildInfo current() {
        return CURRENT;
    }

    /** Fails unless {@code sc} runs the Spark and Scala of this jar's line. */
    void requireRunsOn(SparkContext sc) {
        requireRunsOn(sc.version(), scala.util.Properties.versionNumberString());
    }

    /** Fails unless {@code sparkVersion} (e.g. "3.5.1") and {@code scalaVersion} (e.g. "2.12.18") are this jar's line. */
    void requireRunsOn(String sparkVersion, String scalaVersion) {
        boolean spark = sparkVersion.equals(runsOn) || sparkVersion.startsWith(runsOn + ".");
        boolean scala = scalaVersion.equals(scalaBinary) || scalaVersion.startsWith(scalaBinary + ".");
        if (!spark || !scala) {
            String wanted = lineFor(sparkVersion, scalaVersion);
            throw new HorovodException("horovod-rs-" + line + " is built for Spark " + runsOn + ".x with Scala "
                    + scalaBinary + ", but this Spark is " + sparkVersion + " with Scala " + scalaVersion + ": "
                    + (lines.contains(wanted) ? "use the jar horovod-rs-" + wanted
                            : "horovod-rs has no jar for it, only for " + String.join(", ", lines))
                    + " (docs/install.md lists the lines)");
        }
    }

    /** The line a Spark and Scala version call for, e.g. spark3.5_2.12 (named in the message, not checked). */
    static String lineFor(String sparkVersion, String scalaVersion) {
        String[] spark = sparkVersion.split("\\.");
        String[] scala = scalaVersion.split("\\.");
        String sparkLine = spark[0].equals("3") && spark.length > 1 ? "3." + spark[1] : spark[0];
        return "spark" + sparkLine + "_" + scala[0] + (scala.length > 1 ? "." + scala[1] : "");
    }

    private static BuildInfo read() {
        try (InputStream in = BuildInfo.class.getResourceAsStream("build.properties")) {
            if (in == null) {
                throw new IllegalStateException("horovod-rs jar without horovod/rs/spark/build.properties: "
                        + "build it with build.gradle");
            }
            Properties p = new Properties();
            p.load(in);
            return new BuildInfo(p.getProperty("line"), p.getProperty("runsOn"), p.getProperty("scala"),
                    p.getProperty("version"), Arrays.asList(p.getProperty("lines", "").split(",")));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read horovod-rs build.properties", e);
        }
    }
}
