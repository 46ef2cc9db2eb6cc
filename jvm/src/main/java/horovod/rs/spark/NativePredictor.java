package horovod.rs.spark;

/**
 * A trained model loaded for inference (batch norm's running statistics, no dropout). Every
 * call predicts one table of feature rows.
 *
 * <p>Internal: the public surface is for {@code horovod.rs.spark.ml} only.
 */
public final class NativePredictor extends NativeHandle {
    private NativePredictor(long handle) {
        super("model", handle, HorovodNative::predictorClose);
    }

    /** Loads weights saved by {@link NativeTrainer#modelBytes()} for the model of {@code modelSpecJson}. */
    public static NativePredictor load(String modelSpecJson, byte[] modelBytes) {
        NativeLibrary.load();
        return new NativePredictor(HorovodNative.predictorCreate(modelSpecJson, modelBytes));
    }

    /**
     * The model's outputs for every row of {@code table}: one array per output, {@code rows x
     * width} values row by row, in the order of the spec's outputs.
     */
    public synchronized float[][] predict(NativeTable table) {
        return HorovodNative.predictorPredict(live(), table.live());
    }

    /**
     * What a model spec reads and produces, as JSON {@code {"inputs": [column, ...], "outputs":
     * [[name, width], ...]}}; fails with a message naming the problem if the spec is invalid.
     */
    public static String describeSpec(String modelSpecJson) {
        NativeLibrary.load();
        return HorovodNative.specDescribe(modelSpecJson);
    }
}
