package horovod.rs.spark;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;

/**
 * A rank's spec as the JSON {@link HorovodNative#join} reads (native/core's {@code launch::RankSpec}):
 * who the rank is, how it finds the other ranks, and the settings of {@link HorovodRunOptions} that
 * were given, no others. What it leaves out comes from Horovod's variables in the executor's
 * environment ({@code spark.executorEnv.*}), then from the native defaults, as on every edge.
 */
final class RankSpec {
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

    private RankSpec() {}

    /** A rank that registers with the driver's rendezvous service; {@code host} is its executor's. */
    static String throughService(
            int rank, int size, String service, String host, int attempt, HorovodRunOptions options) {
        ObjectNode rendezvous = NODES.objectNode();
        rendezvous.putObject("service").put("address", service).put("host", host).put("attempt", attempt);
        return json(rank, size, rendezvous, options);
    }

    /** A rank of ranks whose addresses are exchanged already: rank r listens at {@code entries[r]}. */
    static String withEntries(int rank, List<String> entries, HorovodRunOptions options) {
        ObjectNode rendezvous = NODES.objectNode();
        entries.forEach(rendezvous.putArray("entries")::add);
        return json(rank, entries.size(), rendezvous, options);
    }

    private static String json(int rank, int size, ObjectNode rendezvous, HorovodRunOptions options) {
        ObjectNode spec = NODES.objectNode().put("rank", rank).put("size", size);
        spec.set("rendezvous", rendezvous);
        spec.setAll((ObjectNode) NativeSettings.parse(options.rankSpecFields()));
        return NativeSettings.write(spec);
    }
}
