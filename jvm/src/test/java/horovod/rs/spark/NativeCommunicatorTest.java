package horovod.rs.spark;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.junit.AfterClass;
import org.junit.Test;

/** The JNI path in one JVM: two ranks on two threads, talking over loopback TCP. */
public class NativeCommunicatorTest {
    private static final byte[] SECRET = "unit-test-secret".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    private static final ExecutorService POOL = Executors.newCachedThreadPool();

    @AfterClass
    public static void stopPool() {
        POOL.shutdownNow();
    }

    /** Runs {@code body} on {@code size} connected ranks and returns their results in rank order. */
    private static <T> List<T> onRanks(int size, byte[][] secrets, Function<NativeCommunicator, T> body) throws Exception {
        List<NativeCommunicator.Listener> listeners = new ArrayList<>();
        List<String> addresses = new ArrayList<>();
        for (int r = 0; r < size; r++) {
            NativeCommunicator.Listener listener = new NativeCommunicator.Listener("127.0.0.1:0");
            listeners.add(listener);
            addresses.add("127.0.0.1:" + listener.port());
        }
        List<Future<T>> futures = new ArrayList<>();
        for (int r = 0; r < size; r++) {
            int rank = r;
            futures.add(POOL.submit(() -> {
                try (NativeCommunicator comm = listeners.get(rank).connect(rank, addresses, secrets[rank], 5_000, 5_000)) {
                    return body.apply(comm);
                }
            }));
        }
        List<T> results = new ArrayList<>();
        for (Future<T> future : futures) {
            results.add(future.get(30, TimeUnit.SECONDS));
        }
        return results;
    }

    @Test
    public void allreduceSumsFloatsAndDoublesAcrossRanks() throws Exception {
        byte[][] secrets = {SECRET, SECRET, SECRET};
        List<double[]> doubles = onRanks(3, secrets, comm -> comm.allreduce(new double[] {1, 2, 3, 4}, ReduceOp.SUM));
        for (double[] result : doubles) {
            assertArrayEquals(new double[] {3, 6, 9, 12}, result, 0.0);
        }
        List<float[]> floats = onRanks(2, secrets, comm -> comm.allreduce(new float[] {2f, 4f}, ReduceOp.AVERAGE));
        for (float[] result : floats) {
            assertArrayEquals(new float[] {2f, 4f}, result, 0f);
        }
    }

    @Test
    public void aWrongSecretFailsWithAHorovodException() throws Exception {
        byte[][] secrets = {SECRET, "another-secret".getBytes(java.nio.charset.StandardCharsets.UTF_8)};
        try {
            onRanks(2, secrets, comm -> comm.allreduce(new float[] {1f}, ReduceOp.SUM));
            fail("ranks with different secrets must not connect");
        } catch (java.util.concurrent.ExecutionException e) {
            assertTrue(String.valueOf(e.getCause()), e.getCause() instanceof HorovodException);
        }
    }

    @Test
    public void aClosedCommunicatorSaysSo() throws Exception {
        NativeCommunicator.Listener listener = new NativeCommunicator.Listener("127.0.0.1:0");
        NativeCommunicator comm = listener.connect(0, List.of("127.0.0.1:" + listener.port()), SECRET, 1_000, 1_000);
        assertArrayEquals(new double[] {7}, comm.allreduce(new double[] {7}, ReduceOp.SUM), 0.0);
        comm.close();
        try {
            comm.allreduce(new double[] {7}, ReduceOp.SUM);
            fail("a closed communicator must refuse collectives");
        } catch (IllegalStateException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("closed"));
        }
    }
}
