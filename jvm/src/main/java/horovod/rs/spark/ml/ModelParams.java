package horovod.rs.spark.ml;

import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.Params;
import org.apache.spark.ml.param.StringArrayParam;

/** The params a {@link HorovodEstimator} and the {@link HorovodModel} it fits share. */
public interface ModelParams extends Params {
    /** Feature columns; empty: the columns the model spec's inputs name. */
    StringArrayParam featureCols();

    /** Columns {@code transform} adds, one per model output. */
    StringArrayParam outputCols();

    /** The model, as model-spec JSON. */
    Param<String> modelSpec();

    default String[] getFeatureCols() {
        return getOrDefault(featureCols());
    }

    default String[] getOutputCols() {
        return getOrDefault(outputCols());
    }

    default String getModelSpec() {
        if (!isDefined(modelSpec())) {
            throw new IllegalArgumentException("no model spec: call setModelSpec with the model's JSON or a ModelSpec");
        }
        return getOrDefault(modelSpec());
    }
}
