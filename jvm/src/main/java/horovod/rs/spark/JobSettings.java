package horovod.rs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.SparkConf;

/**
 * A job's settings as the native table reads them (native/core's {@code launch::JobSettings}) from
 * the {@code spark.horovod.rs.*} keys and Horovod's variables the driver sees; a key wins over its
 * variable. They are read once, on the driver: the rank-spec fields they set travel to every rank
 * in its spec ({@link #rankSpecFields}), and a rank fills the rest from its executor's environment
 * ({@code spark.executorEnv.*}), then from the defaults.
 */
final class JobSettings implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The keys given: by the Spark configuration, then one by one. */
    private final TreeMap<String, String> keys;
    /** Horovod's variables of the driver's environment that the table reads. */
    private final TreeMap<String, String> variables;

    /** The rank-spec fields the keys and variables set, as a JSON object: nothing else. */
    final String rankSpecFields;

    // The driver's own settings.
    final Duration startTimeout;
    final int fitAttempts;
    /** The fewest ranks a fit's later attempt may run with; null: all of them. */
    final Integer fitMinProcesses;
    final double gpusPerRank;
    final boolean driverRendezvous;

    // What the ranks run with unless their executors' environment sets Horovod's variable.
    final Duration connectTimeout;
    final Duration collectiveTimeout;
    final boolean hierarchicalAllreduce;
    final boolean tls;
    final long fusionThresholdBytes;
    final Duration cycleTime;
    final Duration stallWarning;
    final Duration stallTimeout;
    final long cacheCapacity;

    /**
     * @throws IllegalArgumentException naming a key or variable whose value the table refuses
     */
    private JobSettings(TreeMap<String, String> keys, TreeMap<String, String> variables) {
        this.keys = keys;
        this.variables = variables;
        JsonNode settings = NativeSettings.jobSettings(keys, variables);
        rankSpecFields = NativeSettings.write(settings.get("spec"));

        JsonNode driver = settings.get("driver");
        startTimeout = Duration.ofNanos(Math.round(driver.get("start_timeout_s").asDouble() * 1e9));
        fitAttempts = driver.get("fit_attempts").asInt();
        fitMinProcesses = driver.get("fit_min_processes").isNull() ? null : driver.get("fit_min_processes").asInt();
        gpusPerRank = driver.get("gpus_per_rank").asDouble();
        // "auto" means the service here: the JVM's driver always runs inside the cluster.
        driverRendezvous = !driver.get("driver_rendezvous").asText().equals("off");

        JsonNode spec = NativeSettings.specWithDefaults(settings.get("spec"));
        connectTimeout = Duration.ofMillis(spec.get("connect_timeout_ms").asLong());
        collectiveTimeout = Duration.ofMillis(spec.get("collective_timeout_ms").asLong());
        hierarchicalAllreduce = spec.get("hierarchical_allreduce").asBoolean();
        tls = spec.get("tls").asBoolean();
        JsonNode engine = spec.get("engine");
        fusionThresholdBytes = engine.get("fusion_threshold_bytes").asLong();
        cycleTime = Duration.ofMillis(engine.get("cycle_time_ms").asLong());
        stallWarning = Duration.ofMillis(engine.get("stall_warning_ms").asLong());
        stallTimeout = Duration.ofMillis(engine.get("stall_timeout_ms").asLong());
        cacheCapacity = engine.get("cache_capacity").asLong();
    }

    /** The settings in {@code conf} and in the driver's environment. */
    static JobSettings fromConf(SparkConf conf) {
        return fromConf(conf, System.getenv());
    }

    /** The settings in {@code conf} and in {@code environment}, the driver's. */
    static JobSettings fromConf(SparkConf conf, Map<String, String> environment) {
        return new JobSettings(NativeSettings.keys(key -> conf.get(key, null)), NativeSettings.variables(environment));
    }

    /** These settings with {@code key} set to {@code value} (in Spark's format). */
    JobSettings with(String key, String value) {
        TreeMap<String, String> changed = new TreeMap<>(keys);
        changed.put(key, value);
        return new JobSettings(changed, variables);
    }
}
