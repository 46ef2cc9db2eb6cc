package horovod.rs.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/** Ranks of one job as threads of this JVM, connected over loopback TCP, for unit tests. */
final class LoopbackRanks {
    /** Spark's defaults, with timeouts short enough for a failing test to end soon. */
    static final HorovodRunOptions OPTIONS = HorovodRunOptions.fromConf(new org.apache.spark.SparkConf(false))
            .withConnectTimeout(java.time.Duration.ofSeconds(5))
            .withCollectiveTimeout(java.time.Duration.ofSeconds(5));
    static final byte[] SECRET = "unit-test-secret".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    private static final ExecutorService POOL = Executors.newCachedThreadPool(runnable -> {
        Thread thread = new Thread(runnable, "loopback-rank");
        thread.setDaemon(true);
        return thread;
    });

    private LoopbackRanks() {}

    /** {@code body} on each of {@code size} ranks sharing one secret; results in rank order. */
    static <T> List<T> run(int size, Function<HorovodContext, T> body) throws Exception {
        byte[][] secrets = new byte[size][];
        Arrays.fill(secrets, SECRET);
        return run(size, secrets, body);
    }

    /** {@code body} on each of {@code size} ranks, rank r proving {@code secrets[r]}; results in rank order. */
    static <T> List<T> run(int size, byte[][] secrets, Function<HorovodContext, T> body) throws Exception {
        List<NativeListener> listeners = new ArrayList<>();
        List<String> addresses = new ArrayList<>();
        for (int r = 0; r < size; r++) {
            NativeListener listener = new NativeListener("127.0.0.1:0");
            listeners.add(listener);
            addresses.add("127.0.0.1:" + listener.port());
        }
        List<Future<T>> futures = new ArrayList<>();
        for (int r = 0; r < size; r++) {
            int rank = r;
            futures.add(POOL.submit(() -> {
                JoinedRank joined = listeners.get(rank).join(
                        RankSpec.withEntries(rank, addresses, OPTIONS), secrets[rank]);
                try (NativeEngine engine = joined.engine) {
                    return body.apply(new HorovodContext(
                            rank, size, joined.localRank, joined.localSize, List.of(), engine));
                }
            }));
        }
        List<T> results = new ArrayList<>();
        for (Future<T> future : futures) {
            results.add(future.get(60, TimeUnit.SECONDS));
        }
        return results;
    }
}
