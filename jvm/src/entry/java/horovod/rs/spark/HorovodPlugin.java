package horovod.rs.spark;

import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * The Spark plugin, enabled with {@code spark.plugins=horovod.rs.spark.HorovodPlugin}: loads the
 * native engine once in every executor as it starts, so that a missing or broken library fails
 * the executor at start with a reason rather than the first training job.
 */
public final class HorovodPlugin implements SparkPlugin {
    @Override
    public DriverPlugin driverPlugin() {
        return new HorovodDriverPlugin();
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new HorovodExecutorPlugin();
    }
}
