package horovod.rs.spark;

import java.util.List;

/**
 * A rank's spec as the JSON {@link HorovodNative#join} reads (native/core's {@code launch::RankSpec}):
 * who the rank is, how it finds the other ranks, and the knobs of {@link HorovodRunOptions}. What it
 * leaves out (encryption, the hierarchical allreduce) comes from Horovod's variables in the executor's
 * environment ({@code spark.executorEnv.*}), then from the native defaults.
 */
final class RankSpec {
    private RankSpec() {}

    /** A rank that registers with the driver's rendezvous service; {@code host} is its executor's. */
    static String throughService(
            int rank, int size, String service, String host, int attempt, HorovodRunOptions options) {
        String rendezvous = "{\"service\":{\"address\":" + quoted(service) + ",\"host\":" + quoted(host)
                + ",\"attempt\":" + attempt + "}}";
        return json(rank, size, rendezvous, options);
    }

    /** A rank of ranks whose addresses are exchanged already: rank r listens at {@code entries[r]}. */
    static String withEntries(int rank, List<String> entries, HorovodRunOptions options) {
        StringBuilder list = new StringBuilder("{\"entries\":[");
        for (int r = 0; r < entries.size(); r++) {
            list.append(r == 0 ? "" : ",").append(quoted(entries.get(r)));
        }
        return json(rank, entries.size(), list.append("]}").toString(), options);
    }

    private static String json(int rank, int size, String rendezvous, HorovodRunOptions options) {
        return "{\"rank\":" + rank + ",\"size\":" + size + ",\"rendezvous\":" + rendezvous
                + ",\"connect_timeout_ms\":" + options.connectTimeout().toMillis()
                + ",\"collective_timeout_ms\":" + options.collectiveTimeout().toMillis()
                + ",\"engine\":{\"cycle_time_ms\":" + options.cycleTime().toMillis()
                + ",\"fusion_threshold_bytes\":" + options.fusionThresholdBytes()
                + ",\"stall_warning_ms\":" + options.stallWarning().toMillis()
                + ",\"stall_timeout_ms\":" + options.stallTimeout().toMillis() + "}}";
    }

    /** {@code text} as a JSON string. */
    static String quoted(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
