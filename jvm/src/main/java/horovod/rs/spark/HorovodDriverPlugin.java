package horovod.rs.spark;

import java.util.Collections;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Driver side of {@link HorovodPlugin}: checks the jar's line and the configuration once, at start-up. */
final class HorovodDriverPlugin implements DriverPlugin {
    private static final Logger LOG = LoggerFactory.getLogger(HorovodDriverPlugin.class);

    @Override
    public Map<String, String> init(SparkContext sc, PluginContext pluginContext) {
        BuildInfo build = BuildInfo.current();
        build.requireRunsOn(sc);
        // Parsing every key now turns a typo in a timeout into an error at start, not mid-job.
        HorovodRunOptions options = HorovodRunOptions.fromConf(sc.getConf());
        LOG.info("horovod-rs {} ({}) driver plugin ready (start timeout {} s, connect timeout {} s, "
                + "collective timeout {} s)", build.version(), build.line(), options.startTimeout().getSeconds(),
                options.connectTimeout().getSeconds(), options.collectiveTimeout().getSeconds());
        return Collections.emptyMap();
    }
}
