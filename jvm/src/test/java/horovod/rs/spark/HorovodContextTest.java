package horovod.rs.spark;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
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

/** The JNI path in one JVM: ranks on threads, each with its engine, talking over loopback TCP. */
public class HorovodContextTest {
    private static final byte[] SECRET = "unit-test-secret".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    private static final ExecutorService POOL = Executors.newCachedThreadPool();

    @AfterClass
    public static void stopPool() {
        POOL.shutdownNow();
    }

    private static <T> List<T> onRanks(int size, byte[][] secrets, Function<HorovodContext, T> body)
            throws Exception {
        return LoopbackRanks.run(size, secrets, body);
    }

    @Test
    public void allreduceSumsFloatsAndDoublesAcrossRanks() throws Exception {
        byte[][] secrets = {SECRET, SECRET, SECRET};
        List<double[]> doubles = onRanks(3, secrets, ctx -> ctx.allreduce(new double[] {1, 2, 3, 4}, ReduceOp.SUM));
        for (double[] result : doubles) {
            assertArrayEquals(new double[] {3, 6, 9, 12}, result, 0.0);
        }
        List<float[]> floats = onRanks(2, secrets, ctx -> ctx.allreduce(new float[] {2f, 4f}, ReduceOp.AVERAGE));
        for (float[] result : floats) {
            assertArrayEquals(new float[] {2f, 4f}, result, 0f);
        }
    }

    @Test
    public void aWrongSecretFailsWithAHorovodException() throws Exception {
        byte[][] secrets = {SECRET, "another-secret".getBytes(java.nio.charset.StandardCharsets.UTF_8)};
        try {
            onRanks(2, secrets, ctx -> ctx.allreduce(new float[] {1f}, ReduceOp.SUM));
            fail("ranks with different secrets must not connect");
        } catch (java.util.concurrent.ExecutionException e) {
            assertTrue(String.valueOf(e.getCause()), e.getCause() instanceof HorovodException);
        }
    }

    @Test
    public void aClosedEngineSaysSo() throws Exception {
        NativeListener listener = new NativeListener("127.0.0.1:0");
        NativeEngine engine = listener.join(RankSpec.withEntries(0, List.of("127.0.0.1:" + listener.port()),
                LoopbackRanks.OPTIONS), SECRET).engine;
        HorovodContext ctx = new HorovodContext(0, 1, 0, 1, List.of(), engine);
        assertArrayEquals(new double[] {7}, ctx.allreduce(new double[] {7}, ReduceOp.SUM), 0.0);
        engine.close();
        try {
            ctx.allreduce(new double[] {7}, ReduceOp.SUM);
            fail("a closed engine must refuse collectives");
        } catch (IllegalStateException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("closed"));
        }
    }

    /** Runs {@code body} with a context on each of {@code size} connected ranks. */
    private static <T> List<T> onContexts(int size, Function<HorovodContext, T> body) throws Exception {
        byte[][] secrets = new byte[size][];
        java.util.Arrays.fill(secrets, SECRET);
        return onRanks(size, secrets, body);
    }

    @Test
    public void broadcastFromEveryRootGivesEveryRankTheRootsData() throws Exception {
        for (int root = 0; root < 3; root++) {
            int r0 = root;
            List<String> results = onContexts(3, ctx -> {
                int r = ctx.rank();
                return java.util.Arrays.toString(ctx.broadcast(new float[] {r, r + 0.5f}, r0))
                        + java.util.Arrays.toString(ctx.broadcast(new double[] {r * 2}, r0))
                        + java.util.Arrays.toString(ctx.broadcast(new int[] {r, -r, 7}, r0))
                        + java.util.Arrays.toString(ctx.broadcast(new long[] {r * 10_000_000_000L}, r0))
                        + java.util.Arrays.toString(ctx.broadcast(new byte[] {(byte) r}, r0));
            });
            String expected = "[" + root + ".0, " + root + ".5][" + (root * 2.0) + "][" + root + ", " + (-root) + ", 7]["
                    + (root * 10_000_000_000L) + "][" + root + "]";
            assertEquals(List.of(expected, expected, expected), results);
        }
    }

    @Test
    public void allgatherConcatenatesArraysOfDifferentLengthsInRankOrder() throws Exception {
        List<String> results = onContexts(3, ctx -> {
            int[] mine = new int[ctx.rank()];  // rank 0 contributes nothing
            java.util.Arrays.fill(mine, ctx.rank());
            return java.util.Arrays.toString(ctx.allgather(mine))
                    + java.util.Arrays.toString(ctx.allgather(new double[] {ctx.rank() / 2.0}))
                    + java.util.Arrays.toString(ctx.allgather(new byte[ctx.rank() == 1 ? 2 : 0]));
        });
        String expected = "[1, 2, 2][0.0, 0.5, 1.0][0, 0]";
        assertEquals(List.of(expected, expected, expected), results);
    }

    @Test
    public void alltoallSendsEachRankItsSplit() throws Exception {
        // Rank r sends r + 1 copies of (10 * r + destination) to each destination but rank 0, which gets none.
        List<long[]> results = onContexts(3, ctx -> {
            int r = ctx.rank();
            long[] data = new long[2 * (r + 1)];
            for (int i = 0; i < data.length; i++) {
                data[i] = 10L * r + 1 + i / (r + 1);
            }
            return ctx.alltoall(data, new int[] {0, r + 1, r + 1});
        });
        assertArrayEquals(new long[] {}, results.get(0));
        assertArrayEquals(new long[] {1, 11, 11, 21, 21, 21}, results.get(1));
        assertArrayEquals(new long[] {2, 12, 12, 22, 22, 22}, results.get(2));
    }

    @Test
    public void reducescatterGivesEachRankItsPartAndEarlierRanksTheExtra() throws Exception {
        List<float[]> results = onContexts(3, ctx -> ctx.reducescatter(new float[] {1, 2, 3, 4, 5, 6, 7}, ReduceOp.SUM));
        assertArrayEquals(new float[] {3, 6, 9}, results.get(0), 0f);
        assertArrayEquals(new float[] {12, 15}, results.get(1), 0f);
        assertArrayEquals(new float[] {18, 21}, results.get(2), 0f);
        List<int[]> ints = onContexts(2, ctx -> ctx.reducescatter(new int[] {ctx.rank(), 5, -ctx.rank()}, ReduceOp.MAX));
        assertArrayEquals(new int[] {1, 5}, ints.get(0));
        assertArrayEquals(new int[] {0}, ints.get(1));
    }

    @Test
    public void allreduceTakesIntegersAndScaleFactors() throws Exception {
        List<String> results = onContexts(2, ctx -> {
            int r = ctx.rank();
            return java.util.Arrays.toString(ctx.allreduce(new int[] {r + 1, Integer.MAX_VALUE}, ReduceOp.SUM))
                    + java.util.Arrays.toString(ctx.allreduce(new long[] {r - 5L}, ReduceOp.MIN))
                    + java.util.Arrays.toString(ctx.allreduce(new byte[] {(byte) (r + 2)}, ReduceOp.PRODUCT))
                    + java.util.Arrays.toString(ctx.allreduce(new double[] {r + 1}, ReduceOp.SUM, 0.5, 10))
                    + java.util.Arrays.toString(ctx.allreduce(new float[] {r + 1}, ReduceOp.AVERAGE, 2, 1));
        });
        String expected = "[3, -2][-5][6][15.0][3.0]";
        assertEquals(List.of(expected, expected), results);
    }

    @Test
    public void disagreeingRanksAllFailNamingTheOther() throws Exception {
        List<String> results = onContexts(2, ctx -> {
            try {
                ctx.broadcast(new int[] {1}, ctx.rank());  // each rank names itself the root
                return "no error";
            } catch (HorovodException e) {
                return e.getMessage();
            }
        });
        for (String result : results) {
            assertTrue(result, result.startsWith("tensor 'broadcast.noname.1' was submitted differently across ranks: "
                    + "operation differs: broadcast from rank 0 on ranks [0]; broadcast from rank 1 on ranks [1]"));
        }
    }

    @Test
    public void badArgumentsAreRejectedWithClearMessages() throws Exception {
        onContexts(1, ctx -> {
            assertRejected("broadcast root 1 is not a rank of this job of 1 ranks", () -> ctx.broadcast(new int[1], 1));
            assertRejected("broadcast root -1 is not a rank", () -> ctx.broadcast(new int[1], -1));
            assertRejected("alltoall needs one split per rank: got 2 splits for 1 ranks",
                    () -> ctx.alltoall(new int[2], new int[] {1, 1}));
            assertRejected("alltoall splits must not be negative", () -> ctx.alltoall(new int[0], new int[] {-1}));
            assertRejected("alltoall splits [3] add up to 3, not to the data's 2 elements",
                    () -> ctx.alltoall(new int[2], new int[] {3}));
            assertRejected("allgather data must not be null", () -> ctx.allgather((float[]) null));
            assertRejected("alltoall splits must not be null", () -> ctx.alltoall(new long[0], null));
            assertRejected("reducescatter op must not be null", () -> ctx.reducescatter(new double[0], null));
            return null;
        });
    }

    private static void assertRejected(String messageStart, Runnable call) {
        try {
            call.run();
            fail("expected a rejection: " + messageStart);
        } catch (IllegalArgumentException | NullPointerException | HorovodException e) {
            assertTrue(e.getMessage(), e.getMessage().contains(messageStart));
        }
    }

    @Test
    public void asyncNamesSubmittedInDifferentOrdersAllComplete() throws Exception {
        List<String> results = onContexts(2, ctx -> {
            int r = ctx.rank();
            List<String> order = r == 0 ? List.of("a", "b", "c") : List.of("c", "a", "b");
            java.util.Map<String, HorovodHandle<double[]>> handles = new java.util.HashMap<>();
            for (String name : order) {
                handles.put(name, ctx.allreduceAsync(name, new double[] {name.charAt(0), r}, ReduceOp.SUM));
            }
            HorovodHandle<int[]> gathered = ctx.allgatherAsync("g", new int[] {r});
            StringBuilder out = new StringBuilder();
            for (String name : List.of("a", "b", "c")) {
                try (HorovodHandle<double[]> handle = handles.get(name)) {
                    out.append(name).append(java.util.Arrays.toString(handle.await()));
                }
            }
            out.append(java.util.Arrays.toString(gathered.await()));
            assertTrue(gathered.poll());
            return out.toString();
        });
        String expected = "a[194.0, 1.0]b[196.0, 1.0]c[198.0, 1.0][0, 1]";
        assertEquals(List.of(expected, expected), results);
    }

    @Test
    public void aNameInFlightTwiceFailsClearlyAndUnwaitedHandlesCanBeClosed() throws Exception {
        // Rank 1 submits "twice" only after rank 0's duplicate was rejected, so rank 0's first
        // "twice" is certainly still in flight when it submits the second.
        java.util.concurrent.CountDownLatch rejected = new java.util.concurrent.CountDownLatch(1);
        List<String> results = onContexts(2, ctx -> {
            String message = "";
            if (ctx.rank() == 1) {
                awaitLatch(rejected);
            }
            HorovodHandle<float[]> first = ctx.allreduceAsync("twice", new float[] {1}, ReduceOp.SUM);
            if (ctx.rank() == 0) {
                try (HorovodHandle<float[]> second = ctx.allreduceAsync("twice", new float[] {1}, ReduceOp.SUM)) {
                    second.await();
                    message = "no error";
                } catch (HorovodException e) {
                    message = e.getMessage();
                }
                rejected.countDown();
            }
            String firstResult = java.util.Arrays.toString(first.await());
            ctx.allreduceAsync("never awaited", new float[] {1}, ReduceOp.SUM).close();
            ctx.barrier();
            return message + "/" + firstResult;
        });
        assertEquals(List.of("tensor 'twice' is already in flight on this rank/[2.0]", "/[2.0]"), results);
    }

    private static void awaitLatch(java.util.concurrent.CountDownLatch latch) {
        try {
            assertTrue(latch.await(20, TimeUnit.SECONDS));
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    public void aMismatchedShapeFailsOnEveryRankNamingTheTensorAndRanks() throws Exception {
        List<String> results = onContexts(3, ctx -> {
            try {
                ctx.allreduceAsync("w", new float[ctx.rank() == 2 ? 4 : 3], ReduceOp.SUM).await();
                return "no error";
            } catch (HorovodException e) {
                return e.getMessage();
            }
        });
        for (String result : results) {
            assertEquals("tensor 'w' was submitted differently across ranks: "
                    + "shape differs: [3] on ranks [0, 1]; [4] on ranks [2]", result);
        }
    }
}
