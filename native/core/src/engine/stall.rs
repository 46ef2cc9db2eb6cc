//! Stall bookkeeping: tensors some ranks submitted and others did not.
//!
//! A rank that forgets a tensor, or submits it under another name, leaves
//! the others waiting for it forever. The coordinator records when each
//! tensor was first submitted (by any rank) and asks [`StallPolicy::verdict`]
//! every round: past `warning` it logs the missing ranks (again every
//! `warning`), past `timeout` it fails the tensor on every rank with an
//! error naming them (Horovod's `stall_inspector`). Cached tensors, which
//! skip the coordinator, are handed back to it once they have waited
//! [`StallPolicy::demote_after`], so they are inspected the same way.
//!
//! Sans-IO: no clock is read here; every instant is passed in.

use std::time::{Duration, Instant};

/// When waiting tensors are reported and failed; `Duration::ZERO` turns a
/// step off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StallPolicy {
    pub warning: Duration,
    pub timeout: Duration,
}

/// What to do about a waiting tensor now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep waiting.
    Wait,
    /// Log the missing ranks.
    Warn,
    /// Fail it on every rank.
    Fail,
}

impl StallPolicy {
    /// The verdict for a tensor first submitted at `first_seen` and last
    /// warned about at `last_warned`.
    pub fn verdict(
        &self,
        first_seen: Instant,
        last_warned: Option<Instant>,
        now: Instant,
    ) -> Verdict {
        let waited = now.saturating_duration_since(first_seen);
        if !self.timeout.is_zero() && waited >= self.timeout {
            return Verdict::Fail;
        }
        if self.warning.is_zero() || waited < self.warning {
            return Verdict::Wait;
        }
        match last_warned {
            Some(at) if now.saturating_duration_since(at) < self.warning => Verdict::Wait,
            _ => Verdict::Warn,
        }
    }

    /// How long a cached tensor may wait for the bit vector to agree before
    /// it goes back to the coordinator (which keeps its age), so it is
    /// warned about and failed on time: half the shorter enabled period, or
    /// never when both are off.
    pub fn demote_after(&self) -> Option<Duration> {
        [self.warning, self.timeout]
            .into_iter()
            .filter(|d| !d.is_zero())
            .min()
            .map(|d| d / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_periodically_then_fails() {
        let policy = StallPolicy {
            warning: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
        };
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(policy.verdict(t0, None, at(9)), Verdict::Wait);
        assert_eq!(policy.verdict(t0, None, at(10)), Verdict::Warn);
        assert_eq!(policy.verdict(t0, Some(at(10)), at(15)), Verdict::Wait);
        assert_eq!(policy.verdict(t0, Some(at(10)), at(20)), Verdict::Warn);
        assert_eq!(policy.verdict(t0, Some(at(20)), at(30)), Verdict::Fail);
        assert_eq!(policy.demote_after(), Some(Duration::from_secs(5)));
    }

    #[test]
    fn zero_turns_a_step_off() {
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(1_000_000);
        let no_timeout = StallPolicy {
            warning: Duration::from_secs(60),
            timeout: Duration::ZERO,
        };
        assert_eq!(no_timeout.verdict(t0, None, late), Verdict::Warn);
        assert_eq!(no_timeout.demote_after(), Some(Duration::from_secs(30)));
        let off = StallPolicy {
            warning: Duration::ZERO,
            timeout: Duration::ZERO,
        };
        assert_eq!(off.verdict(t0, None, late), Verdict::Wait);
        assert_eq!(off.demote_after(), None);
        let only_timeout = StallPolicy {
            warning: Duration::ZERO,
            timeout: Duration::from_secs(2),
        };
        assert_eq!(
            only_timeout.verdict(t0, None, t0 + Duration::from_secs(1)),
            Verdict::Wait
        );
        assert_eq!(
            only_timeout.verdict(t0, None, t0 + Duration::from_secs(2)),
            Verdict::Fail
        );
    }
}
