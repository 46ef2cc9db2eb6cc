package horovod.rs.spark.ml;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.lang.reflect.Modifier;
import java.util.List;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.spark.ml.Estimator;
import org.apache.spark.ml.Transformer;
import org.junit.Test;

/**
 * What Spark ML on Spark Connect asks of a jar's stages before a client can use them: the server
 * lists the registered classes with ServiceLoader (every class needs a public no-argument
 * constructor, or the listing fails for all of Spark ML), builds an estimator from the client's
 * uid, and loads a model through its static {@code load}.
 */
public class ConnectRegistrationTest {
    @Test
    public void theServerListsTheEstimatorAndTheModel() {
        assertTrue(registered(Estimator.class).contains(HorovodEstimator.class.getName()));
        assertTrue(registered(Transformer.class).contains(HorovodModel.class.getName()));
    }

    @Test
    public void theServerBuildsTheEstimatorWithTheClientsUid() throws ReflectiveOperationException {
        Object estimator = HorovodEstimator.class.getConstructor(String.class).newInstance("HorovodEstimator_client");
        assertEquals("HorovodEstimator_client", ((HorovodEstimator) estimator).uid());
    }

    @Test
    public void theServerLoadsBothThroughTheirStaticLoad() throws ReflectiveOperationException {
        for (Class<?> stage : List.of(HorovodEstimator.class, HorovodModel.class)) {
            assertTrue(Modifier.isStatic(stage.getMethod("load", String.class).getModifiers()));
        }
    }

    @Test
    public void theRegistryOnlyModelRefusesToTransform() {
        HorovodModel empty = new HorovodModel();
        IllegalStateException refused = assertThrows(IllegalStateException.class, () -> empty.transform(null));
        assertTrue(refused.getMessage(), refused.getMessage().contains("has no weights"));
    }

    /** The registered classes, as the server lists them (it instantiates none while listing). */
    private static Set<String> registered(Class<?> service) {
        return ServiceLoader.load(service).stream().map(p -> p.type().getName()).collect(Collectors.toSet());
    }
}
