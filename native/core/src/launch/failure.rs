//! How a driver tells a failure worth reporting from one that is not the
//! failing code's own, by the words of its message: both Spark drivers (the
//! JVM's, and the Python package's through its binding) ask here.
//!
//! - [`rank_lost`]: Spark aborted the stage because a task was lost with its
//!   executor or Python worker. Nothing in the ranks' code failed, so a new
//!   attempt of the job may succeed.
//! - [`follows_peer`]: a rank's error only follows another rank's failure
//!   (its connection closed, its engine stopped, it left the job); the other
//!   rank's own error is the one to report.
//!
//! And the words a rank of a Spark job leaves with ([`departure`]), which
//! the other ranks' errors quote ("rank 1 left the job (its function failed
//! at 03:38:43 UTC: ValueError: ...)") and [`departed_failing`] reads back:
//! a rank whose peers only returned keeps its job's world, one whose peer
//! failed is told so.

/// Spark's words for a task lost with its executor or Python worker.
const RANK_LOST: &[&str] = &[
    "ExecutorLostFailure",
    "Executor heartbeat timed out",
    "Python worker exited unexpectedly",
    "Worker crashed",
    "worker lost",
];

/// The words of errors that follow another rank's failure: the engine's
/// ([`crate::Error`]'s `PeerLost`, `EngineStopped` and `Unusable`, and
/// the cause an engine gives when a rank leaves the job) and Horovod's name
/// for them in Python.
const FOLLOWS_PEER: &[&str] = &[
    "connection to rank",
    "the engine has stopped",
    "unusable after an earlier failure",
    "left the job",
    "lost its peer",
    "HorovodInternalError",
];

/// What a rank that returned from its function leaves its job with.
const RETURNED: &str = "its function returned";
/// What a rank whose function failed leaves its job with, before the error.
const FAILED: &str = "its function failed";

/// Why a rank of a Spark job leaves it, at `unix_seconds`: its function
/// returned, or failed with `error` (its first line is kept).
pub fn departure(error: Option<&str>, unix_seconds: u64) -> String {
    let day = unix_seconds % 86_400;
    let at = format!("{:02}:{:02}:{:02} UTC", day / 3600, day / 60 % 60, day % 60);
    match error {
        None => format!("{RETURNED} at {at}"),
        Some(error) => {
            let first_line: String = error
                .trim()
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            format!("{FAILED} at {at}: {first_line}")
        }
    }
}

/// Whether a departure's `reason` says the rank's function failed.
pub fn departed_failing(reason: &str) -> bool {
    reason.starts_with(FAILED)
}

/// Whether Spark's failure `text` says a task was lost with its executor
/// or Python worker, not failed by its own code.
pub fn rank_lost(text: &str) -> bool {
    RANK_LOST.iter().any(|marker| text.contains(marker))
}

/// Whether a rank's error `text` only follows another rank's failure.
pub fn follows_peer(text: &str) -> bool {
    FOLLOWS_PEER.iter().any(|marker| text.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn a_departure_says_how_and_when_and_is_read_back() {
        // 1795665523 s after the epoch is 03:58:43 UTC.
        let returned = departure(None, 1_795_665_523);
        assert_eq!(returned, "its function returned at 03:58:43 UTC");
        assert!(!departed_failing(&returned));
        let failed = departure(Some("ValueError: bad\nmore lines"), 1_795_665_523);
        assert_eq!(
            failed,
            "its function failed at 03:58:43 UTC: ValueError: bad"
        );
        assert!(departed_failing(&failed));
        assert!(!departed_failing("shut down"));
    }

    #[test]
    fn spark_losing_an_executor_or_a_python_worker_is_a_lost_rank() {
        for text in [
            "Job aborted due to stage failure: Task 1 in stage 3.0 failed 1 times, most recent failure: \
             Lost task 1.0 in stage 3.0 (TID 7) (10.0.0.2 executor 1): ExecutorLostFailure (executor 1 \
             exited caused by one of the running tasks) Reason: Command exited with code 137",
            "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)",
            "Executor heartbeat timed out after 120000 ms",
            "Worker crashed",
            "Lost task 0.0: worker lost",
        ] {
            assert!(rank_lost(text), "{text}");
        }
        for text in [
            "Job aborted due to stage failure: ValueError: bad input on rank 2",
            "the engine has stopped: rank 1 left the job (it failed)",
        ] {
            assert!(!rank_lost(text), "{text}");
        }
    }

    #[test]
    fn the_engines_errors_after_another_ranks_failure_follow_it() {
        for error in [
            Error::PeerLost {
                rank: 2,
                context: "during allreduce: the peer closed the connection".into(),
            },
            Error::EngineStopped {
                cause: "rank 1 left the job (its function raised ValueError)".into(),
            },
            Error::EngineStopped {
                cause: "the engine was shut down (on this or another rank)".into(),
            },
            Error::Unusable {
                cause: "connection to rank 0 lost".into(),
            },
        ] {
            assert!(follows_peer(&error.to_string()), "{error}");
        }
        assert!(follows_peer(
            "HorovodInternalError: rank 3 left the job (its executor was decommissioned)"
        ));
    }

    #[test]
    fn a_ranks_own_error_does_not_follow_a_peer() {
        for error in [
            Error::InvalidArgument("rank 2 is out of range for a job of 2 ranks".into()),
            Error::Stalled {
                name: "grad".into(),
                missing: vec![1],
                waited: std::time::Duration::from_secs(480),
            },
            Error::Timeout {
                what: "after 600s waiting for rank 1".into(),
                rank: Some(1),
            },
        ] {
            assert!(!follows_peer(&error.to_string()), "{error}");
        }
        assert!(!follows_peer("ValueError: bad input on rank 2"));
    }
}
