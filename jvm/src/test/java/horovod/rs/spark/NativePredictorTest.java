package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import org.junit.Test;

/** The trainer's exports that need no table or engine: spec checks and model loading. */
public class NativePredictorTest {
    private static final String SPEC = "{\"inputs\": [{\"name\": \"x\", \"type\": \"float\", \"columns\": [\"a\", \"b\"]},"
            + " {\"name\": \"c\", \"type\": \"categorical\", \"vocabulary\": 4}],"
            + " \"layers\": [{\"name\": \"e\", \"type\": \"embedding\", \"input\": \"c\", \"dim\": 2},"
            + " {\"name\": \"all\", \"type\": \"concatenate\", \"inputs\": [\"x\", \"e\"]},"
            + " {\"name\": \"p\", \"type\": \"dense\", \"input\": \"all\", \"units\": 3, \"activation\": \"softmax\"}],"
            + " \"outputs\": [\"p\"]}";

    @Test
    public void describesWhatASpecReadsAndProduces() {
        assertEquals("{\"inputs\":[\"a\",\"b\",\"c\"],\"outputs\":[[\"p\",3]]}", NativePredictor.describeSpec(SPEC));
    }

    @Test
    public void invalidSpecsAreNamed() {
        HorovodException e = assertThrows(HorovodException.class,
                () -> NativePredictor.describeSpec(SPEC.replace("\"input\": \"all\"", "\"input\": \"everything\"")));
        assertTrue(e.getMessage(), e.getMessage().contains("layer 'p': reads 'everything', which is not defined before it"));
        HorovodException json = assertThrows(HorovodException.class, () -> NativePredictor.describeSpec("{\"inputs\": 3"));
        assertTrue(json.getMessage(), json.getMessage().startsWith("model spec:"));
    }

    @Test
    public void weightsThatAreNotAModelAreRejected() {
        HorovodException e = assertThrows(HorovodException.class,
                () -> NativePredictor.load(SPEC, new byte[] {1, 2, 3}));
        assertTrue(e.getMessage(), e.getMessage().contains("not a horovod-rs checkpoint or model"));
    }
}
