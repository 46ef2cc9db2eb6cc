package horovod.rs.spark.ml;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.Test;

public class ModelSpecTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    @Test
    public void buildsTheDocumentedJson() throws Exception {
        String json = ModelSpec.builder()
                .floatInput("num", "x1", "x2")
                .categoricalInput("cat", 5)
                .embedding("cat_emb", "cat", 3)
                .concatenate("all", "num", "cat_emb")
                .dense("hidden", "all", 32, "relu", 5e-5)
                .dropout("drop", "hidden", 0.5)
                .dense("out", "drop", 1, "linear")
                .scaledSigmoid("y_hat", "out", 9.6)
                .output("y_hat")
                .build().toJson();
        JsonNode spec = JSON.readTree(json);
        assertEquals("[\"x1\",\"x2\"]", spec.at("/inputs/0/columns").toString());
        assertEquals("categorical", spec.at("/inputs/1/type").asText());
        assertEquals(5, spec.at("/inputs/1/vocabulary").asInt());
        assertEquals("[\"cat\"]", spec.at("/inputs/1/columns").toString());
        assertEquals("embedding", spec.at("/layers/0/type").asText());
        assertEquals("[\"num\",\"cat_emb\"]", spec.at("/layers/1/inputs").toString());
        assertEquals(5e-5, spec.at("/layers/2/l2").asDouble(), 0);
        assertTrue("no l2 key when there is no regularisation", spec.at("/layers/4/l2").isMissingNode());
        assertEquals("scaled_sigmoid", spec.at("/layers/5/activation").asText());
        assertEquals(9.6, spec.at("/layers/5/scale").asDouble(), 0);
        assertEquals("[\"y_hat\"]", spec.get("outputs").toString());
    }

    @Test
    public void namesWhatIsUndefinedOrDefinedTwice() {
        IllegalArgumentException undefined = assertThrows(IllegalArgumentException.class,
                () -> ModelSpec.builder().floatInput("x").dense("h", "y", 3, "relu"));
        assertEquals("'h' reads 'y', which is not defined before it", undefined.getMessage());
        IllegalArgumentException twice = assertThrows(IllegalArgumentException.class,
                () -> ModelSpec.builder().floatInput("x").dense("x", "x", 3, "relu"));
        assertEquals("'x' is defined twice in the model spec", twice.getMessage());
        IllegalArgumentException noOutput = assertThrows(IllegalArgumentException.class,
                () -> ModelSpec.builder().floatInput("x").build());
        assertTrue(noOutput.getMessage(), noOutput.getMessage().contains("at least one output"));
    }
}
