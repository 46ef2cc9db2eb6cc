package horovod.rs.spark;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Puts the native engine's log records (stall warnings, failed tensors) into the JVM's logging:
 * the logger {@code horovod.rs.native}, so they land in the executor's log4j output (the Spark
 * UI's executor logs) at levels log4j's configuration picks, each message naming its rank.
 *
 * <p>Engine threads never call into the JVM: they queue their records natively, and one daemon
 * thread here takes them out. The native level follows this logger's level (checked again every
 * second, so Spark's own logging setup and {@code setLogLevel} take effect) unless
 * {@code HOROVOD_LOG_LEVEL} is set.
 */
final class NativeLogForwarder {
    static final String LOGGER_NAME = "horovod.rs.native";
    private static final Logger LOG = LoggerFactory.getLogger(LOGGER_NAME);
    private static final boolean LEVEL_FROM_ENV = System.getenv("HOROVOD_LOG_LEVEL") != null;
    private static boolean started;
    private static String level;

    private NativeLogForwarder() {}

    /** Starts forwarding, once per class loader (with the native library). */
    static synchronized void start() {
        if (started) {
            return;
        }
        started = true;
        syncLevel();
        HorovodNative.forwardLogs(true);
        Thread reader = new Thread(NativeLogForwarder::forward, "horovod-rs-native-logs");
        reader.setDaemon(true);
        reader.start();
    }

    /** Lets through the native records this logger would log now. */
    static synchronized void syncLevel() {
        String now = nativeLevel(LOG);
        if (!LEVEL_FROM_ENV && !now.equals(level)) {
            HorovodNative.setLogLevel(now);
            level = now;
        }
    }

    static String nativeLevel(Logger logger) {
        if (logger.isTraceEnabled()) {
            return "trace";
        } else if (logger.isDebugEnabled()) {
            return "debug";
        } else if (logger.isInfoEnabled()) {
            return "info";
        } else if (logger.isWarnEnabled()) {
            return "warning";
        }
        return logger.isErrorEnabled() ? "error" : "off";
    }

    private static void forward() {
        while (true) {
            String record = HorovodNative.nextLogRecord(1000);
            if (!record.isEmpty()) {
                log(record);
            }
            syncLevel();
        }
    }

    /** Logs one record of {@link HorovodNative#nextLogRecord}'s format. */
    static void log(String record) {
        String[] fields = record.split("\t", 4);
        String message = fields[3];
        if (!fields[1].isEmpty() && !message.startsWith("rank ")) {
            message = "rank " + fields[1] + ": " + message;
        }
        switch (fields[0]) {
            case "ERROR":
                LOG.error(message);
                break;
            case "WARN":
                LOG.warn(message);
                break;
            case "INFO":
                LOG.info(message);
                break;
            case "DEBUG":
                LOG.debug(message);
                break;
            default:
                LOG.trace(message);
        }
    }
}
