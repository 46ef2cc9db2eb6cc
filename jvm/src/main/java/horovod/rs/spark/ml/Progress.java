package horovod.rs.spark.ml;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import horovod.rs.spark.store.Store;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;

/**
 * One line per epoch on the driver. The ranks run on executors, so the driver learns about
 * epochs from the history rank 0 rewrites in the store after each one; without a store, the lines
 * come when the fit ends.
 */
final class Progress {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long POLL_MS = 500;

    private final boolean verbose;
    private final Store store;
    private final String runId;
    private final PrintStream out = System.out;
    private int printed;
    private Thread poller;

    Progress(boolean verbose, Store store, String runId) {
        this.verbose = verbose;
        this.store = store;
        this.runId = runId;
    }

    void say(String line) {
        if (verbose) {
            out.println("horovod-rs: " + line);
        }
    }

    /** Starts following the store's history, if there is a store. */
    void start() {
        if (!verbose || store == null) {
            return;
        }
        poller = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                try {
                    Thread.sleep(POLL_MS);
                    readHistory().ifPresent(this::printNew);
                } catch (InterruptedException e) {
                    return;
                } catch (RuntimeException e) {
                    // A half-visible store (eventually consistent object stores) only delays a line.
                }
            }
        }, "horovod-rs-progress-" + runId);
        poller.setDaemon(true);
        poller.start();
    }

    void stop() {
        if (poller != null) {
            poller.interrupt();
            try {
                poller.join(2 * POLL_MS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Prints the epochs not printed yet from the final history. */
    void finish(String historyJson) {
        if (!verbose || historyJson == null) {
            return;
        }
        try {
            printNew(JSON.readTree(historyJson));
        } catch (IOException e) {
            say("unreadable history: " + e.getMessage());
        }
    }

    private Optional<JsonNode> readHistory() {
        return store.read(store.runFile(runId, Store.HISTORY)).map(bytes -> {
            try {
                return JSON.readTree(new String(bytes, StandardCharsets.UTF_8));
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        });
    }

    private synchronized void printNew(JsonNode history) {
        for (int i = printed; i < history.size(); i++) {
            out.println("horovod-rs: " + formatEpoch(history.get(i)));
        }
        printed = Math.max(printed, history.size());
    }

    /** "epoch 3: 12345 samples/s, loss=0.1234 mae=0.2 val_loss=0.1300 ..." */
    static String formatEpoch(JsonNode report) {
        StringBuilder line = new StringBuilder("epoch ").append(report.path("epoch").asInt() + 1);
        if (report.has("samples_per_second")) {
            line.append(String.format(Locale.ROOT, ": %.0f samples/s,", report.get("samples_per_second").asDouble()));
        }
        appendMetrics(line, report.path("train"), "");
        appendMetrics(line, report.path("val"), "val_");
        if (report.path("best").asBoolean(false)) {
            line.append(" (best)");
        }
        return line.toString();
    }

    private static void appendMetrics(StringBuilder line, JsonNode metrics, String prefix) {
        for (Map.Entry<String, JsonNode> metric : metrics.properties()) {
            line.append(String.format(Locale.ROOT, " %s%s=%.6g", prefix, metric.getKey(), metric.getValue().asDouble()));
        }
    }
}
