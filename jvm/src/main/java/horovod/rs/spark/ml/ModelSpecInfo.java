package horovod.rs.spark.ml;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import horovod.rs.spark.Lists;
import horovod.rs.spark.NativePredictor;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

/** What a model spec reads (input columns) and produces (named outputs and their widths). */
final class ModelSpecInfo {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final List<String> inputColumns;
    private final List<String> outputNames;
    private final List<Integer> outputWidths;

    private ModelSpecInfo(List<String> inputColumns, List<String> outputNames, List<Integer> outputWidths) {
        this.inputColumns = Lists.copyOf(inputColumns);
        this.outputNames = Lists.copyOf(outputNames);
        this.outputWidths = Lists.copyOf(outputWidths);
    }

    List<String> inputColumns() {
        return inputColumns;
    }

    List<String> outputNames() {
        return outputNames;
    }

    List<Integer> outputWidths() {
        return outputWidths;
    }

    /** Checks the spec natively (the trainer's own parser) and describes it. */
    static ModelSpecInfo of(String modelSpecJson) {
        JsonNode description;
        try {
            description = JSON.readTree(NativePredictor.describeSpec(modelSpecJson));
        } catch (IOException e) {
            throw new UncheckedIOException("unreadable model description", e);
        }
        List<String> inputs = new ArrayList<>();
        description.get("inputs").forEach(column -> inputs.add(column.asText()));
        List<String> names = new ArrayList<>();
        List<Integer> widths = new ArrayList<>();
        description.get("outputs").forEach(output -> {
            names.add(output.get(0).asText());
            widths.add(output.get(1).asInt());
        });
        return new ModelSpecInfo(inputs, names, widths);
    }
}
