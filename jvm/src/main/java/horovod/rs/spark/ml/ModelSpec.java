package horovod.rs.spark.ml;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import horovod.rs.spark.Lists;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * A model for the native trainer: named inputs read from DataFrame columns, then layers, each
 * naming the layer (or input) it reads, then the outputs. {@link #toJson()} gives the model-spec
 * JSON that {@link HorovodEstimator#setModelSpec(String)} takes (docs/model-spec.md).
 *
 * <pre>{@code
 * ModelSpec spec = ModelSpec.builder()
 *     .floatInput("num", "x1", "x2")          // two double columns, side by side
 *     .categoricalInput("store", 1115)        // integer indices 0..1114 in column "store"
 *     .embedding("store_emb", "store", 10)
 *     .concatenate("all", "num", "store_emb")
 *     .dense("hidden", "all", 64, "relu")
 *     .dense("y_hat", "hidden", 1, "linear")
 *     .output("y_hat")
 *     .build();
 * }</pre>
 *
 * <p>The builder checks names as it goes (every layer reads something defined before it, no name
 * twice); the native trainer checks the rest (shapes, vocabulary sizes) when the spec is used.
 */
public final class ModelSpec implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final ObjectMapper JSON = new ObjectMapper();

    private final String json;

    private ModelSpec(String json) {
        this.json = json;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** A spec from its JSON, as written by {@link #toJson()} or by hand. */
    public static ModelSpec fromJson(String json) {
        return new ModelSpec(Objects.requireNonNull(json, "json must not be null"));
    }

    public String toJson() {
        return json;
    }

    @Override
    public String toString() {
        return json;
    }

    /** Builds a spec layer by layer; every method returns this builder. */
    public static final class Builder {
        private final ArrayNode inputs = JSON.createArrayNode();
        private final ArrayNode layers = JSON.createArrayNode();
        private final List<String> outputs = new ArrayList<>();
        private final Set<String> names = new HashSet<>();

        private Builder() {}

        /** An input of float features: the given numeric, array or vector columns, concatenated. */
        public Builder floatInput(String name, String... columns) {
            ObjectNode input = input(name, "float");
            input.putPOJO("columns", Lists.of(columns.length == 0 ? new String[] {name} : columns));
            return this;
        }

        /** A categorical input: integer indices in {@code [0, vocabulary)} in the column {@code name}. */
        public Builder categoricalInput(String name, int vocabulary) {
            return categoricalInput(name, name, vocabulary);
        }

        /** A categorical input named {@code name} read from {@code column}. */
        public Builder categoricalInput(String name, String column, int vocabulary) {
            ObjectNode input = input(name, "categorical");
            input.putPOJO("columns", Lists.of(column));
            input.put("vocabulary", vocabulary);
            return this;
        }

        /** A learned {@code dim}-wide vector per category of a categorical input. */
        public Builder embedding(String name, String input, int dim) {
            layer(name, "embedding", input).put("dim", dim);
            return this;
        }

        /** A fully connected layer; activation relu, tanh, sigmoid, softmax or linear. */
        public Builder dense(String name, String input, int units, String activation) {
            return dense(name, input, units, activation, 0.0);
        }

        /** A fully connected layer with L2 regularisation of its kernel ({@code l2 * sum(w^2)} in the loss). */
        public Builder dense(String name, String input, int units, String activation, double l2) {
            ObjectNode layer = layer(name, "dense", input);
            layer.put("units", units);
            layer.put("activation", activation);
            if (l2 != 0.0) {
                layer.put("l2", l2);
            }
            return this;
        }

        /** Batch normalisation (Keras' defaults: momentum 0.99, epsilon 0.001). */
        public Builder batchNorm(String name, String input) {
            layer(name, "batch_norm", input);
            return this;
        }

        /** Drops a fraction {@code rate} of values while training. */
        public Builder dropout(String name, String input, double rate) {
            layer(name, "dropout", input).put("rate", rate);
            return this;
        }

        /** Joins its inputs side by side. */
        public Builder concatenate(String name, String... inputs) {
            ObjectNode layer = layer(name, "concatenate", null);
            layer.putPOJO("inputs", Lists.of(inputs));
            for (String input : inputs) {
                requireDefined(input, name);
            }
            return this;
        }

        /** Flattens everything but the batch dimension. */
        public Builder flatten(String name, String input) {
            layer(name, "flatten", input);
            return this;
        }

        /** Reshapes everything but the batch dimension. */
        public Builder reshape(String name, String input, int... shape) {
            ArrayNode dims = layer(name, "reshape", input).putArray("shape");
            for (int dim : shape) {
                dims.add(dim);
            }
            return this;
        }

        /** An activation on its own: relu, tanh, sigmoid, softmax or linear. */
        public Builder activation(String name, String input, String activation) {
            layer(name, "activation", input).put("activation", activation);
            return this;
        }

        /** {@code scale * sigmoid(x)}: outputs in {@code (0, scale)}, as the Rossmann model's. */
        public Builder scaledSigmoid(String name, String input, double scale) {
            ObjectNode layer = layer(name, "activation", input);
            layer.put("activation", "scaled_sigmoid");
            layer.put("scale", scale);
            return this;
        }

        /** Marks layers as the model's outputs, in order; labels and output columns follow it. */
        public Builder output(String... layerNames) {
            for (String layer : layerNames) {
                requireDefined(layer, "outputs");
                outputs.add(layer);
            }
            return this;
        }

        public ModelSpec build() {
            if (outputs.isEmpty()) {
                throw new IllegalArgumentException("a model spec needs at least one output: call output(layer)");
            }
            ObjectNode spec = JSON.createObjectNode();
            spec.set("inputs", inputs.deepCopy());
            spec.set("layers", layers.deepCopy());
            spec.putPOJO("outputs", Lists.copyOf(outputs));
            return new ModelSpec(spec.toString());
        }

        private ObjectNode input(String name, String type) {
            claim(name);
            ObjectNode input = inputs.addObject();
            input.put("name", name);
            input.put("type", type);
            return input;
        }

        private ObjectNode layer(String name, String type, String input) {
            if (input != null) {
                requireDefined(input, name);
            }
            claim(name);
            ObjectNode layer = layers.addObject();
            layer.put("name", name);
            layer.put("type", type);
            if (input != null) {
                layer.put("input", input);
            }
            return layer;
        }

        private void claim(String name) {
            if (name == null || name.isEmpty()) {
                throw new IllegalArgumentException("inputs and layers need a name");
            }
            if (!names.add(name)) {
                throw new IllegalArgumentException("'" + name + "' is defined twice in the model spec");
            }
        }

        private void requireDefined(String name, String user) {
            if (!names.contains(name)) {
                throw new IllegalArgumentException("'" + user + "' reads '" + name + "', which is not defined before it");
            }
        }
    }
}
