package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.List;
import org.junit.Test;

public class HorovodRunnerTest {
    @Test
    public void resultsComeBackInRankOrder() {
        RankOutcome[] outcomes = {RankOutcome.success(2, "c"), RankOutcome.success(0, "a"), RankOutcome.success(1, "b")};
        assertEquals(List.of("a", "b", "c"), HorovodRunner.resultsInRankOrder(outcomes, 3));
    }

    @Test
    public void theRootCauseIsTheRankThatFailedOnItsOwn() {
        RankOutcome[] outcomes = {
            RankOutcome.failure(0, new HorovodPeerLostException("connection to rank 2 lost during allreduce")),
            RankOutcome.success(1, "fine"),
            RankOutcome.failure(2, new IllegalArgumentException("bad input on rank 2")),
        };
        try {
            HorovodRunner.resultsInRankOrder(outcomes, 3);
            fail("expected a failure");
        } catch (HorovodJobFailedException e) {
            assertEquals(2, e.rank());
            assertEquals("java.lang.IllegalArgumentException", e.remoteClassName());
            assertEquals("rank 2 of 3 failed: java.lang.IllegalArgumentException: bad input on rank 2",
                    e.getMessage().lines().findFirst().orElse(""));
        }
    }

    @Test
    public void aRankThatOnlySawAnotherLeaveIsNotTheCause() {
        RankOutcome[] outcomes = {
            RankOutcome.failure(0, new IllegalStateException("training failed",
                    new HorovodPeerLostException("the engine has stopped: rank 1 left the job (it threw)"))),
            RankOutcome.failure(1, new ArithmeticException("/ by zero")),
        };
        try {
            HorovodRunner.resultsInRankOrder(outcomes, 2);
            fail("expected a failure");
        } catch (HorovodJobFailedException e) {
            assertEquals(1, e.rank());
        }
    }

    @Test
    public void aResultCalledNotFinalRunsAgainWithoutCountingAsALostAttempt() {
        java.util.List<Integer> calls = new java.util.ArrayList<>();
        String result = HorovodRunner.withAttempts(2, "knob", attempt -> {
            calls.add(attempt);
            if (attempt == 1) {
                throw new HorovodRankLostException("ExecutorLostFailure", null);
            }
            return attempt < 4 ? "regrow" : "done";
        }, (attempt, lost) -> { }, (attempt, r) -> r.equals("regrow"));
        assertEquals("done", result);
        assertEquals(List.of(1, 2, 3, 4), calls);
    }

    @Test
    public void theLastLostAttemptNamesTheCountAndTheKnob() {
        try {
            HorovodRunner.withAttempts(2, "knob", attempt -> {
                throw new HorovodRankLostException("ExecutorLostFailure", null);
            }, (attempt, lost) -> { });
            fail("expected a failure");
        } catch (HorovodRankLostException e) {
            assertTrue(e.getMessage(), e.getMessage().endsWith("(attempt 2 of 2; knob sets the number of attempts)"));
        }
    }

    @Test
    public void sparkLosingAnExecutorOrAPythonWorkerIsALostRank() {
        assertTrue(HorovodRankLostException.isRankLost(new RuntimeException("job aborted",
                new RuntimeException("ExecutorLostFailure (executor 1 exited caused by one of the running tasks)"))));
        assertTrue(HorovodRankLostException.isRankLost(new RuntimeException("Python worker exited unexpectedly")));
        assertFalse(HorovodRankLostException.isRankLost(new RuntimeException("Task failed: / by zero")));
    }

    @Test
    public void peerLossAloneIsReportedWhenNothingElseFailed() {
        RankOutcome[] outcomes = {
            RankOutcome.success(0, "fine"),
            RankOutcome.failure(1, new HorovodPeerLostException("connection to rank 0 lost during allreduce")),
        };
        try {
            HorovodRunner.resultsInRankOrder(outcomes, 2);
            fail("expected a failure");
        } catch (HorovodJobFailedException e) {
            assertEquals(1, e.rank());
        }
    }
}
