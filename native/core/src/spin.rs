//! Busy-waiting that backs off while it does not pay.
//!
//! A rank that waits for a running peer on another core hears from it
//! within microseconds: polling for that long saves the sleep and wake-up
//! (tens of microseconds on a virtual machine, where waking an idle core
//! goes through the hypervisor). But a rank that waits for a peer which
//! cannot run, because both share one core for a while, only delays it. So
//! each waiter keeps a budget: doubled (up to [`MAX_NANOS`]) after a wait
//! the spin covered, halved (down to [`MIN_NANOS`]) after one it did not.
//! Callers check once before spinning, and a wait that needed no spin
//! leaves the budget alone: ranks taking turns on one core find each other
//! done every other time, which says nothing about spinning.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Longest spin: well above a running peer's answer, well below a sleep.
const MAX_NANOS: u32 = 20_000;
/// Shortest spin, where a waiter that keeps its peer off the core ends up.
const MIN_NANOS: u32 = 500;

/// Whether `ranks` processes on this host may busy-wait for each other:
/// there is a core for each, so a spinning rank does not take the core of
/// the one it waits for.
pub(crate) fn a_core_each(ranks: usize) -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) >= ranks
}

/// How long the next wait of one waiter spins.
#[derive(Debug)]
pub(crate) struct SpinBudget {
    nanos: AtomicU32,
}

impl SpinBudget {
    pub(crate) fn new() -> SpinBudget {
        SpinBudget {
            nanos: AtomicU32::new(MAX_NANOS),
        }
    }

    /// Polls `ready` until it returns true (then true) or the budget runs
    /// out (then false), and adjusts the budget.
    pub(crate) fn spin(&self, mut ready: impl FnMut() -> bool) -> bool {
        let budget = self.nanos.load(Relaxed);
        let until = Instant::now() + Duration::from_nanos(u64::from(budget));
        loop {
            std::hint::spin_loop();
            if ready() {
                self.nanos
                    .store(budget.saturating_mul(2).min(MAX_NANOS), Relaxed);
                return true;
            }
            if Instant::now() >= until {
                self.nanos.store((budget / 2).max(MIN_NANOS), Relaxed);
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_halves_when_spinning_fails_and_doubles_when_it_pays() {
        let budget = SpinBudget::new();
        for _ in 0..10 {
            assert!(!budget.spin(|| false));
        }
        assert_eq!(budget.nanos.load(Relaxed), MIN_NANOS);
        let mut polls = 0;
        assert!(budget.spin(|| {
            polls += 1;
            polls == 3
        }));
        assert_eq!(budget.nanos.load(Relaxed), 2 * MIN_NANOS);
        for _ in 0..10 {
            assert!(budget.spin(|| true));
        }
        assert_eq!(budget.nanos.load(Relaxed), MAX_NANOS);
    }
}
