package horovod.rs.spark;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.junit.BeforeClass;
import org.junit.Test;

/** The Run API on a real local-cluster: two executor JVMs, one rank in each. */
public class HorovodRunnerIT {
    private static SparkSession spark;

    @BeforeClass
    public static void joinCluster() {
        spark = LocalCluster.session();
    }

    @Test(timeout = 120_000)
    public void allreduceGivesTheSameSumOnEveryRank() {
        List<double[]> results = HorovodRunner.run(spark, 2, ctx -> {
            double[] data = new double[1000];
            for (int i = 0; i < data.length; i++) {
                data[i] = i * (ctx.rank() + 1);
            }
            return ctx.allreduce(data, ReduceOp.SUM);
        });
        double[] expected = new double[1000];
        for (int i = 0; i < expected.length; i++) {
            expected[i] = i * 3.0;  // i*1 from rank 0 plus i*2 from rank 1
        }
        assertEquals(2, results.size());
        assertArrayEquals(expected, results.get(0), 0.0);
        assertArrayEquals(expected, results.get(1), 0.0);
    }

    @Test(timeout = 120_000)
    public void broadcastFromRankOneAndAllgatherOfDifferentLengths() {
        List<String> results = HorovodRunner.run(spark, 2, ctx -> {
            double[] weights = ctx.broadcast(new double[] {ctx.rank(), ctx.rank() * 2.0}, 1);
            long[] mine = new long[ctx.rank() + 1];  // rank 0 gives one element, rank 1 two
            java.util.Arrays.fill(mine, 10L * (ctx.rank() + 1));
            long[] gathered = ctx.allgather(mine);
            return java.util.Arrays.toString(weights) + " " + java.util.Arrays.toString(gathered);
        });
        String expected = "[1.0, 2.0] [10, 20, 20]";
        assertEquals(List.of(expected, expected), results);
    }

    @Test(timeout = 120_000)
    public void rankZerosRendezvousWorksToo() {
        HorovodRunOptions options = HorovodRunOptions.fromConf(spark.sparkContext().getConf())
                .withDriverRendezvous(false);
        List<Double> sums = HorovodRunner.run(spark, 2,
                ctx -> ctx.allreduce(new double[] {ctx.rank() + 1.0}, ReduceOp.SUM)[0], options);
        assertEquals(List.of(3.0, 3.0), sums);
    }

    @Test(timeout = 120_000)
    public void floatAverageAndRankInfoComeBackInRankOrder() {
        List<String> results = HorovodRunner.run(spark, 2, ctx -> {
            float[] avg = ctx.allreduce(new float[] {ctx.rank() * 10f, 1f}, ReduceOp.AVERAGE);
            return ctx.rank() + "/" + ctx.size() + " local " + ctx.localRank() + "/" + ctx.localSize()
                    + " avg " + avg[0] + "," + avg[1];
        });
        // Both executors of a local-cluster run on this host, so the two ranks are local to each other.
        assertEquals(List.of("0/2 local 0/2 avg 5.0,1.0", "1/2 local 1/2 avg 5.0,1.0"), results);
    }

    @Test(timeout = 120_000)
    public void eachRankSeesItsAssignedGpu() {
        HorovodRunOptions options = HorovodRunOptions.fromConf(spark.sparkContext().getConf()).withGpusPerRank(1);
        List<List<String>> gpus = HorovodRunner.run(spark, 2, HorovodContext::gpuAddresses, options);
        assertEquals(2, gpus.size());
        for (List<String> rankGpus : gpus) {
            assertEquals("one GPU per rank: " + gpus, 1, rankGpus.size());
            assertTrue("GPU address from the discovery script: " + gpus, Set.of("0", "1").contains(rankGpus.get(0)));
        }
    }

    @Test(timeout = 120_000)
    public void withoutGpuRequestRanksSeeNoGpus() {
        List<List<String>> gpus = HorovodRunner.run(spark, 2, HorovodContext::gpuAddresses);
        assertEquals(List.of(List.of(), List.of()), gpus);
    }

    @Test(timeout = 120_000)
    public void asyncNamesSubmittedInDifferentOrdersAllComplete() {
        List<String> results = HorovodRunner.run(spark, 2, ctx -> {
            int r = ctx.rank();
            List<String> order = r == 0 ? List.of("a", "b", "c") : List.of("c", "a", "b");
            java.util.Map<String, HorovodHandle<float[]>> handles = new java.util.HashMap<>();
            for (String name : order) {
                handles.put(name, ctx.allreduceAsync(name, new float[] {name.charAt(0), r + 1}, ReduceOp.SUM));
            }
            StringBuilder out = new StringBuilder();
            for (String name : List.of("a", "b", "c")) {
                try (HorovodHandle<float[]> handle = handles.get(name)) {
                    out.append(name).append(java.util.Arrays.toString(handle.await()));
                }
            }
            return out.toString();
        });
        String expected = "a[194.0, 3.0]b[196.0, 3.0]c[198.0, 3.0]";
        assertEquals(List.of(expected, expected), results);
    }

    @Test(timeout = 120_000)
    public void aMismatchedShapeFailsOnEveryRankNamingTheTensorAndRanks() {
        List<String> results = HorovodRunner.run(spark, 2, ctx -> {
            try (HorovodHandle<double[]> handle =
                    ctx.allreduceAsync("weights", new double[ctx.rank() + 2], ReduceOp.SUM)) {
                handle.await();
                return "no error";
            } catch (HorovodException e) {
                return e.getClass().getSimpleName() + ": " + e.getMessage();
            }
        });
        String expected = "HorovodException: tensor 'weights' was submitted differently across ranks: "
                + "shape differs: [2] on ranks [0]; [3] on ranks [1]";
        assertEquals(List.of(expected, expected), results);
    }

    @Test(timeout = 120_000)
    public void aThrowingRankFailsTheJobWithItsMessageQuickly() {
        long start = System.nanoTime();
        try {
            HorovodRunner.run(spark, 2, ctx -> {
                if (ctx.rank() == 1) {
                    throw new IllegalStateException("boom from rank 1");
                }
                // Rank 0 waits in a collective that rank 1 never joins: it must not hang.
                return ctx.allreduce(new double[] {1.0}, ReduceOp.SUM)[0];
            });
            fail("the job should have failed");
        } catch (HorovodJobFailedException e) {
            assertEquals(1, e.rank());
            assertEquals(IllegalStateException.class.getName(), e.remoteClassName());
            assertTrue(e.getMessage(), e.getMessage().startsWith("rank 1 of 2 failed: java.lang.IllegalStateException: boom from rank 1"));
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        assertTrue("failure took " + seconds + " s", seconds < 30);
    }

    @Test(timeout = 120_000)
    public void aCollectiveAfterAPeerReturnedNamesItAndWhy() {
        List<String> results = HorovodRunner.run(spark, 2, ctx -> {
            if (ctx.rank() == 1) {
                return "returned";
            }
            try {
                ctx.allreduce(new double[] {1.0}, ReduceOp.SUM);
                return "the allreduce ran without rank 1";
            } catch (HorovodException e) {
                return e.getMessage();
            }
        });
        assertEquals("returned", results.get(1));
        assertTrue(results.get(0), results.get(0).matches(
                "(?s).*the engine has stopped: rank 1 left the job \\(its function returned at \\d\\d:\\d\\d:\\d\\d UTC\\).*"));
    }

    @Test(timeout = 120_000)
    public void moreRanksThanSlotsFailsWithinTheStartTimeout() {
        HorovodRunOptions options = HorovodRunOptions.fromConf(spark.sparkContext().getConf())
                .withStartTimeout(Duration.ofSeconds(3));
        long start = System.nanoTime();
        try {
            HorovodRunner.run(spark, 3, ctx -> ctx.rank(), options);
            fail("3 ranks cannot start on 2 slots");
        } catch (HorovodTimeoutException e) {
            assertTrue(e.getMessage(), e.getMessage().startsWith("the cluster has 2 task slots for 3 ranks after waiting 3 s"));
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        assertTrue("failure took " + seconds + " s", seconds < 20);
    }

    @Test(timeout = 120_000)
    public void invalidArgumentsAreRejectedOnTheDriver() {
        try {
            HorovodRunner.run(spark, 0, ctx -> 1);
            fail("numProc 0 must be rejected");
        } catch (IllegalArgumentException e) {
            assertEquals("numProc must be at least 1, got 0", e.getMessage());
        }
    }

    /**
     * withMaxAttempts: rank 1's executor exits mid-job (once: a marker file says it did); the job
     * runs again on the executor the worker starts in its place. Without it, the loss is named.
     */
    @Test(timeout = 300_000)
    public void aLostExecutorRunsTheJobAgainWhenAsked() throws Exception {
        java.io.File marker = java.io.File.createTempFile("horovod-rs-lost", ".marker");
        marker.delete();
        String markerPath = marker.getAbsolutePath();
        HorovodRunOptions options = HorovodRunOptions.fromConf(spark.sparkContext().getConf()).withMaxAttempts(2);
        List<Integer> ranks = HorovodRunner.run(spark, 2, ctx -> {
            if (ctx.rank() == 1 && new java.io.File(markerPath).createNewFile()) {
                Runtime.getRuntime().halt(137);  // the executor dies, as a killed one does
            }
            return ctx.rank();
        }, options);
        assertEquals(List.of(0, 1), ranks);
        assertTrue(marker.delete());

        try {
            HorovodRunner.run(spark, 2, ctx -> {
                if (ctx.rank() == 1 && new java.io.File(markerPath).createNewFile()) {
                    Runtime.getRuntime().halt(137);
                }
                return ctx.rank();
            });
            fail("a lost executor must fail a job of one attempt");
        } catch (HorovodRankLostException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("attempt 1 of 1"));
        } finally {
            marker.delete();
        }
    }
}
