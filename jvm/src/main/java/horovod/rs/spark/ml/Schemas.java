package horovod.rs.spark.ml;

import horovod.rs.spark.Lists;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.ml.linalg.SQLDataTypes;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** Column checks shared by fit and transform, made on the driver before any Spark job runs. */
final class Schemas {
    private Schemas() {}

    /** The feature columns: the set ones, or the columns the spec's inputs read. */
    static List<String> featureColumns(ModelParams params, ModelSpecInfo spec) {
        String[] set = params.getFeatureCols();
        List<String> features = set.length == 0 ? spec.inputColumns() : Arrays.asList(set);
        if (!features.containsAll(spec.inputColumns())) {
            List<String> missing = new ArrayList<>(spec.inputColumns());
            missing.removeAll(features);
            throw new IllegalArgumentException("the model spec reads columns " + missing
                    + " that are not among featureCols " + features);
        }
        return Lists.copyOf(features);
    }

    /** The output columns: the set ones, else "prediction" for one output, else the outputs' names. */
    static List<String> outputColumns(ModelParams params, ModelSpecInfo spec) {
        String[] set = params.getOutputCols();
        if (set.length == 0) {
            return spec.outputNames().size() == 1 ? Lists.of("prediction") : spec.outputNames();
        }
        if (set.length != spec.outputNames().size()) {
            throw new IllegalArgumentException("outputCols " + Arrays.toString(set) + " must name one column per model "
                    + "output " + spec.outputNames());
        }
        return Lists.of(set);
    }

    /** Fails, naming the column and what exists, unless {@code column} is in {@code schema}. */
    static void requireColumn(StructType schema, String column, String role) {
        if (!Arrays.asList(schema.fieldNames()).contains(column)) {
            throw new IllegalArgumentException(role + " column '" + column + "' is not in the DataFrame; its columns are "
                    + Arrays.toString(schema.fieldNames()));
        }
    }

    /**
     * {@code schema} with the model's output columns appended (a double for a width-1 output,
     * a vector otherwise), after checking that the features exist and the outputs do not.
     */
    static StructType withOutputs(StructType schema, ModelSpecInfo spec, ModelParams params) {
        for (String feature : featureColumns(params, spec)) {
            requireColumn(schema, feature, "feature");
        }
        List<String> outputs = outputColumns(params, spec);
        StructType result = schema;
        for (int i = 0; i < outputs.size(); i++) {
            String name = outputs.get(i);
            if (Arrays.asList(schema.fieldNames()).contains(name)) {
                throw new IllegalArgumentException("output column '" + name + "' already exists in the DataFrame; "
                        + "choose other outputCols");
            }
            boolean scalar = spec.outputWidths().get(i) == 1;
            result = result.add(new StructField(name, scalar ? DataTypes.DoubleType : SQLDataTypes.VectorType(),
                    false, org.apache.spark.sql.types.Metadata.empty()));
        }
        return result;
    }
}
