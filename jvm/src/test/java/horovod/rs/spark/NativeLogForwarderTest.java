package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.appender.AbstractAppender;
import org.apache.logging.log4j.core.config.LoggerConfig;
import org.apache.logging.log4j.core.config.Property;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

public class NativeLogForwarderTest {
    /** Keeps the messages log4j hands it. */
    private static final class Collecting extends AbstractAppender {
        final List<String> messages = new CopyOnWriteArrayList<>();

        Collecting() {
            super("collecting", null, null, true, Property.EMPTY_ARRAY);
        }

        @Override
        public void append(LogEvent event) {
            messages.add(event.getLevel() + " " + event.getMessage().getFormattedMessage());
        }
    }

    private final Collecting appender = new Collecting();
    private final LoggerContext context = (LoggerContext) LogManager.getContext(false);

    @Before
    public void collectHorovodRsNativeAtWarn() throws Exception {
        // A first job makes Spark set up its logging (which replaces the configuration) before
        // the appender is added, not while the test runs.
        LoopbackRanks.run(1, ctx -> ctx.rank());
        appender.start();
        LoggerConfig logger = new LoggerConfig(NativeLogForwarder.LOGGER_NAME, Level.WARN, true);
        logger.addAppender(appender, Level.WARN, null);
        context.getConfiguration().addLogger(NativeLogForwarder.LOGGER_NAME, logger);
        context.updateLoggers();
        NativeLogForwarder.syncLevel();  // else within a second
    }

    @After
    public void restoreLogging() {
        context.getConfiguration().removeLogger(NativeLogForwarder.LOGGER_NAME);
        context.updateLoggers();
        NativeLogForwarder.syncLevel();
    }

    private List<String> messagesWith(String text) {
        return appender.messages.stream().filter(m -> m.contains(text)).sorted().toList();
    }

    @Test
    public void engineWarningsReachLog4jUnderHorovodRsNativeNamingTheRank() throws Exception {
        List<String> errors = LoopbackRanks.run(2, ctx -> {
            try {
                ctx.allreduceAsync("logged.mismatch", new float[ctx.rank() + 1], ReduceOp.SUM).await();
                return "no error";
            } catch (HorovodException e) {
                return "failed";
            }
        });
        assertEquals(List.of("failed", "failed"), errors);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (messagesWith("logged.mismatch").size() < 2 && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        // Both ranks run in this JVM: each record names the rank whose engine logged it.
        List<String> logged = messagesWith("logged.mismatch");
        assertEquals(logged.toString(), 2, logged.size());
        assertTrue(logged.get(0), logged.get(0).startsWith("WARN rank 0: tensor 'logged.mismatch'"));
        assertTrue(logged.get(1), logged.get(1).startsWith("WARN rank 1: tensor 'logged.mismatch'"));
    }

    @Test
    public void recordsKeepTheirLevelAndARecordWithoutARankItsText() {
        NativeLogForwarder.log("ERROR\t\thorovod_core::x\tthe service stopped");
        NativeLogForwarder.log("INFO\t3\thorovod_core::x\tbelow the level");
        assertEquals(List.of("ERROR the service stopped"), messagesWith("the service"));
        assertEquals(List.of(), messagesWith("below the level"));
    }
}
