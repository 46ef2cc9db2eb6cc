//! Busy-waiting, and yielding the core, that back off while they do not pay.
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
//!
//! After spinning, a waiter yields the core for a while ([`Yielding`]): where
//! ranks outnumber the cores, that hands the core to a peer that has work to
//! do, and the peer answers within microseconds. But where the core's other
//! thread is not a rank in a hurry (a framework's compute thread, another
//! process), a yield gives it a whole time slice, a few milliseconds, while
//! a waiter asleep on a futex is woken, and runs, as soon as its peer
//! signals. A yield that takes that long says so; the waiter then sleeps at
//! once for a while before it tries yielding again.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::thread;
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

/// How long a waiter yields the core, at most, before it sleeps.
const YIELD_FOR: Duration = Duration::from_millis(2);
/// A yield this long gave the core to a thread that runs whole time slices
/// (a few ms); handing the core to a waiting rank takes microseconds.
const LONG_YIELD: Duration = Duration::from_millis(1);
/// Waits that go straight to sleep after a long yield, before yielding is
/// tried again (the other thread may have gone).
const WAITS_WITHOUT_YIELDING: u32 = 256;

/// Whether, and how long, one waiter yields the core before it sleeps.
#[derive(Debug, Default)]
pub(crate) struct Yielding {
    /// Waits left that skip yielding.
    skipped: AtomicU32,
}

impl Yielding {
    /// Yields the core until `ready` returns true (then true), for at most
    /// [`YIELD_FOR`]; false when the time is up, or at once when yielding
    /// does not pay now: the caller then sleeps until woken.
    pub(crate) fn yield_until(&self, mut ready: impl FnMut() -> bool) -> bool {
        let skipped = self.skipped.load(Relaxed);
        if skipped > 0 {
            self.skipped.store(skipped - 1, Relaxed);
            return ready();
        }
        let started = Instant::now();
        let mut last = started;
        while last - started < YIELD_FOR {
            if ready() {
                return true;
            }
            thread::yield_now();
            let now = Instant::now();
            if now - last >= LONG_YIELD {
                self.skipped.store(WAITS_WITHOUT_YIELDING, Relaxed);
                return ready();
            }
            last = now;
        }
        ready()
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

    #[test]
    fn yielding_returns_once_ready() {
        let mut polls = 0;
        assert!(Yielding::default().yield_until(|| {
            polls += 1;
            polls >= 2
        }));
    }

    #[test]
    fn yielding_stops_for_a_while_after_a_long_yield() {
        let yielding = Yielding::default();
        // A peer not ready a millisecond after the first poll: as after a
        // yield that lost the core for a time slice.
        let mut polls = 0;
        assert!(!yielding.yield_until(|| {
            polls += 1;
            if polls == 2 {
                std::thread::sleep(LONG_YIELD);
            }
            false
        }));
        assert_eq!(yielding.skipped.load(Relaxed), WAITS_WITHOUT_YIELDING);
        let mut polls = 0;
        assert!(!yielding.yield_until(|| {
            polls += 1;
            false
        }));
        assert_eq!(polls, 1, "a skipped wait polls once and sleeps");
        assert_eq!(yielding.skipped.load(Relaxed), WAITS_WITHOUT_YIELDING - 1);
    }
}
