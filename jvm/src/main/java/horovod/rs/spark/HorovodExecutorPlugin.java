package horovod.rs.spark;

import java.util.Map;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Executor side of {@link HorovodPlugin}: loads the native library before any task runs. */
final class HorovodExecutorPlugin implements ExecutorPlugin {
    private static final Logger LOG = LoggerFactory.getLogger(HorovodExecutorPlugin.class);

    @Override
    public void init(PluginContext ctx, Map<String, String> extraConf) {
        NativeLibrary.load();
        LOG.info("horovod-rs native library loaded in executor {}", ctx.executorID());
    }
}
