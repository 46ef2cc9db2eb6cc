package horovod.rs.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.UncheckedIOException;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Function;

/**
 * The JVM's side of the native table of settings (native/core's {@code launch/settings.rs}), where
 * every {@code spark.horovod.rs.*} key, its Horovod variable, default, doc and parsers are declared
 * once for both Spark drivers: its rows, and a job's settings read through it.
 */
final class NativeSettings {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** One setting as the table declares it; {@code variable} is null where Horovod has none. */
    static final class Row {
        private final String key;
        private final String variable;
        private final String defaultValue;
        private final String doc;

        Row(String key, String variable, String defaultValue, String doc) {
            this.key = key;
            this.variable = variable;
            this.defaultValue = defaultValue;
            this.doc = doc;
        }

        String key() {
            return key;
        }

        String variable() {
            return variable;
        }

        String defaultValue() {
            return defaultValue;
        }

        String doc() {
            return doc;
        }
    }

    private NativeSettings() {}

    /** Every row by key, in the table's order. */
    static Map<String, Row> rows() {
        return Rows.BY_KEY;
    }

    /** Read on first use, so that naming a key does not load the native library. */
    private static final class Rows {
        static final Map<String, Row> BY_KEY = read();

        private static Map<String, Row> read() {
            Map<String, Row> rows = new LinkedHashMap<>();
            for (JsonNode row : parse(HorovodNative.settingTable())) {
                String key = row.get("key").asText();
                String variable = row.get("variable").isNull() ? null : row.get("variable").asText();
                rows.put(key, new Row(key, variable, row.get("default").asText(), row.get("doc").asText()));
            }
            return Collections.unmodifiableMap(rows);
        }
    }

    static Row row(String key) {
        Row row = rows().get(key);
        if (row == null) {
            throw new IllegalStateException("the native table of settings has no key " + key);
        }
        return row;
    }

    /** The table's keys that {@code lookup} finds a value for. */
    static TreeMap<String, String> keys(Function<String, String> lookup) {
        TreeMap<String, String> keys = new TreeMap<>();
        for (String key : rows().keySet()) {
            String value = lookup.apply(key);
            if (value != null) {
                keys.put(key, value);
            }
        }
        return keys;
    }

    /** The table's Horovod variables that {@code environment} sets. */
    static TreeMap<String, String> variables(Map<String, String> environment) {
        TreeMap<String, String> variables = new TreeMap<>();
        for (Row row : rows().values()) {
            if (row.variable() != null && environment.get(row.variable()) != null) {
                variables.put(row.variable(), environment.get(row.variable()));
            }
        }
        return variables;
    }

    /**
     * The settings of a job from Spark conf {@code keys} and Horovod's {@code variables} (a key wins
     * over its variable): {@code {"spec": {the rank-spec fields set}, "driver": {...}}}.
     *
     * @throws IllegalArgumentException naming a bad key or variable and its value
     */
    static JsonNode jobSettings(Map<String, String> keys, Map<String, String> variables) {
        return parse(HorovodNative.jobSettings(write(keys), write(variables)));
    }

    /** The rank-spec fields a rank runs with when its spec holds {@code fields} and its environment sets none. */
    static JsonNode specWithDefaults(JsonNode fields) {
        return parse(HorovodNative.specWithDefaults(write(fields)));
    }

    static JsonNode parse(String json) {
        try {
            return JSON.readTree(json);
        } catch (JsonProcessingException e) {
            throw new UncheckedIOException("invalid JSON from the native table of settings", e);
        }
    }

    static String write(Object value) {
        try {
            return JSON.writeValueAsString(value);
        } catch (JsonProcessingException e) {
            throw new UncheckedIOException("cannot write " + value + " as JSON", e);
        }
    }
}
