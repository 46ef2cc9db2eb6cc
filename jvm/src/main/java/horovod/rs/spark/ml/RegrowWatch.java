package horovod.rs.spark.ml;

import horovod.rs.spark.store.Store;
import org.apache.spark.SparkContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * While a fit's attempt runs on fewer ranks than the fit wants: counts the cluster's task slots
 * every {@link #POLL_MILLIS} ms and, once there are enough (an executor restarted or added),
 * writes the attempt's regrow marker to the store, which asks its ranks to stop after their
 * epoch ({@link FitRank}).
 */
final class RegrowWatch {
    private static final Logger LOG = LoggerFactory.getLogger(RegrowWatch.class);
    static final long POLL_MILLIS = 2000;

    private final Thread thread;

    private RegrowWatch(Thread thread) {
        this.thread = thread;
    }

    static RegrowWatch start(SparkContext sc, int wanted, Store store, String marker) {
        Thread thread = new Thread(() -> {
            try {
                while (!Thread.currentThread().isInterrupted()) {
                    Thread.sleep(POLL_MILLIS);
                    if (FitJob.taskSlots(sc) >= wanted) {
                        store.write(marker, new byte[0]);
                        return;
                    }
                }
            } catch (InterruptedException e) {
                // The attempt ended first.
            } catch (RuntimeException e) {
                LOG.warn("the fit cannot ask its ranks to grow back to {}: {}", wanted, e.getMessage());
            }
        }, "horovod-rs regrow watch");
        thread.setDaemon(true);
        thread.start();
        return new RegrowWatch(thread);
    }

    /** Stops watching (the attempt ended) and waits for the watch to end. */
    void close() {
        thread.interrupt();
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
