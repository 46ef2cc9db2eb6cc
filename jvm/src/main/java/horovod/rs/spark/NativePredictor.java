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
        long handle = live();
        float[] all = HorovodNative.predictorPredict(handle, table.live());
        int[] widths = HorovodNative.predictorOutputWidths(handle);
        int rowValues = java.util.Arrays.stream(widths).sum();
        int rows = rowValues == 0 ? 0 : all.length / rowValues;
        float[][] outputs = new float[widths.length][];
        int offset = 0;
        for (int o = 0; o < widths.length; o++) {
            outputs[o] = java.util.Arrays.copyOfRange(all, offset, offset + rows * widths[o]);
            offset += rows * widths[o];
        }
        return outputs;
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
