package horovod.rs.spark;

import java.io.File;
import java.net.URISyntaxException;
import org.apache.spark.sql.SparkSession;

/**
 * One real Spark cluster for every test class of the run: a driver (this JVM) and two executor
 * JVMs ({@code local-cluster[2,1,1024]}), with the jar under test shipped as a user would ship it,
 * the plugin on, and two fake GPUs per worker. Started by the first class that asks, stopped when
 * the test JVM exits (a cluster start costs seconds; the classes leave it as they found it).
 */
public final class LocalCluster {
    private static SparkSession shared;

    private LocalCluster() {}

    public static synchronized SparkSession session() {
        if (shared == null) {
            shared = start();
            SparkSession stopping = shared;
            Runtime.getRuntime().addShutdownHook(new Thread(stopping::stop, "stop local-cluster"));
        }
        return shared;
    }

    private static SparkSession start() {
        String jar = existingFile("horovod.rs.jar");
        String testJar = existingFile("horovod.rs.test.jar");
        SparkSession spark = SparkSession.builder()
                .appName("horovod-rs integration tests")
                .master("local-cluster[2,1,1024]")
                .config("spark.jars", jar + "," + testJar)
                .config("spark.plugins", HorovodPlugin.class.getName())
                .config("spark.ui.enabled", "false")
                .config("spark.worker.resource.gpu.amount", "2")
                .config("spark.worker.resource.gpu.discoveryScript", resourcePath("fake-gpus.sh"))
                .config("spark.executor.resource.gpu.amount", "1")
                .config("spark.executor.resource.gpu.discoveryScript", resourcePath("fake-gpus.sh"))
                // A fit that loses an executor goes on with the rank left (HorovodEstimatorIT).
                .config("spark.horovod.rs.fitMinProcesses", "1")
                .getOrCreate();
        awaitExecutors(spark, 2);
        return spark;
    }

    /** getOrCreate returns before executors register; tests that time themselves need them up. */
    private static void awaitExecutors(SparkSession spark, int executors) {
        long deadline = System.nanoTime() + 60_000_000_000L;
        // The driver is listed among the executor infos too.
        while (spark.sparkContext().statusTracker().getExecutorInfos().length < executors + 1) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("local-cluster executors did not register within 60 s");
            }
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while waiting for executors", e);
            }
        }
    }

    private static String existingFile(String property) {
        String path = System.getProperty(property);
        if (path == null || !new File(path).isFile()) {
            throw new IllegalStateException("system property " + property + " must name a built jar, got " + path);
        }
        return path;
    }

    private static String resourcePath(String name) {
        try {
            return new File(LocalCluster.class.getResource("/" + name).toURI()).getAbsolutePath();
        } catch (URISyntaxException | NullPointerException e) {
            throw new IllegalStateException("test resource " + name + " is missing", e);
        }
    }
}
