package horovod.rs.spark;

import java.io.File;
import java.net.URISyntaxException;
import org.apache.spark.sql.SparkSession;

/**
 * One real Spark cluster for a whole test suite: a driver (this JVM) and two executor JVMs
 * ({@code local-cluster[2,1,1024]}), with horovod-rs.jar shipped as a user would ship it, the
 * plugin on, and two fake GPUs per worker.
 */
final class LocalCluster {
    private LocalCluster() {}

    static SparkSession start(String appName) {
        String jar = System.getProperty("horovod.rs.jar");
        if (jar == null || !new File(jar).isFile()) {
            throw new IllegalStateException("system property horovod.rs.jar must name the built horovod-rs.jar, got " + jar);
        }
        return SparkSession.builder()
                .appName(appName)
                .master("local-cluster[2,1,1024]")
                .config("spark.jars", jar)
                .config("spark.plugins", HorovodPlugin.class.getName())
                .config("spark.ui.enabled", "false")
                .config("spark.worker.resource.gpu.amount", "2")
                .config("spark.worker.resource.gpu.discoveryScript", resourcePath("fake-gpus.sh"))
                .config("spark.executor.resource.gpu.amount", "1")
                .config("spark.executor.resource.gpu.discoveryScript", resourcePath("fake-gpus.sh"))
                .getOrCreate();
    }

    private static String resourcePath(String name) {
        try {
            return new File(LocalCluster.class.getResource("/" + name).toURI()).getAbsolutePath();
        } catch (URISyntaxException | NullPointerException e) {
            throw new IllegalStateException("test resource " + name + " is missing", e);
        }
    }
}
