//! N ranks' negotiation in one thread, in lockstep: the engine's own state
//! machines (a [`RankState`] per rank, rank 0's [`Coordinator`]) with the
//! transport's three exchanges (the AND of the bit vectors, the gather of
//! request lists on rank 0, the broadcast of its responses) replaced by
//! function calls, and the clock by a counter advancing one cycle time per
//! cycle.
//!
//! The engine's tests run it (module `simulation`) and so does
//! `horovod-bench-scale`, which measures what a cycle costs at thousands of
//! ranks: each rank's calls are timed on their own (this thread's CPU
//! clock, so other processes' load does not count), so a cycle reports the
//! coordinator's CPU time apart from the workers', and the bytes each
//! exchange would move.
//!
//! Invariant: nothing here decides anything the engine's thread
//! (`background`) does not; the steps are called in the same order.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::config::EngineConfig;
use super::coordinator::{Coordinator, StallReport};
use super::negotiation::{AfterBits, CyclePlan, RankState};
use super::request::Request;
use super::transport::pack_bits;

/// What one cycle cost, by rank and by exchange.
#[derive(Clone, Debug, Default)]
pub struct CycleCost {
    /// CPU time on rank 0: its own negotiation (submissions since the last
    /// cycle included) and the coordinator's round.
    pub coordinator: Duration,
    /// CPU time on each other rank (`workers[r - 1]` is rank `r`'s),
    /// submissions since the last cycle included.
    pub workers: Vec<Duration>,
    /// Bytes of one rank's bit vector as the TCP transport sums it (each bit
    /// in a field wide enough to count the ranks).
    pub bits_per_rank: usize,
    /// Bytes of every rank's request list together (0 without a round).
    pub requests: usize,
    /// Bytes of the coordinator's response list (0 without a round).
    pub responses: usize,
    /// Whether the cycle had a negotiation round.
    pub round: bool,
    /// Tensors planned for execution on rank 0.
    pub planned: usize,
    /// Tensors failed (mismatch, stall) on any rank, with the error.
    pub failed: Vec<(usize, String, String)>,
}

/// What one cycle did on every rank (the tests read the plans).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Cycle {
    /// Rank `r`'s plan; empty once the ranks stopped.
    pub plans: Vec<CyclePlan>,
    pub warnings: Vec<StallReport>,
    pub stopped: bool,
    pub cost: CycleCost,
}

/// A job of simulated ranks running the engine's negotiation.
#[derive(Debug)]
pub struct SimulatedJob {
    pub(crate) ranks: Vec<RankState>,
    pub(crate) coordinator: Coordinator,
    /// The simulated clock.
    pub(crate) now: Instant,
    cycle_time: Duration,
    /// CPU time each rank spent in submissions since the last cycle.
    submitting: Vec<Duration>,
}

impl SimulatedJob {
    /// `size` ranks with `config` (its cycle time is the clock's step).
    ///
    /// # Errors
    /// `InvalidArgument` for no ranks.
    pub fn new(size: usize, config: &EngineConfig) -> Result<SimulatedJob> {
        if size == 0 {
            return Err(Error::InvalidArgument(
                "a job needs at least one rank".into(),
            ));
        }
        config.check()?;
        let stall = config.stall_policy();
        Ok(SimulatedJob {
            ranks: (0..size)
                .map(|r| {
                    RankState::new(
                        r,
                        config.cache_capacity,
                        config.fusion_threshold,
                        stall.demote_after(),
                    )
                })
                .collect(),
            coordinator: Coordinator::new(size, stall),
            now: Instant::now(),
            cycle_time: config.cycle_time.max(Duration::from_micros(1)),
            submitting: vec![Duration::ZERO; size],
        })
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// Tensors submitted on any rank and not yet planned or failed.
    pub fn in_flight(&self) -> usize {
        self.ranks.iter().map(RankState::in_flight).sum()
    }

    /// Submits `request` on `rank` (its data is not looked at).
    ///
    /// # Errors
    /// `InvalidArgument` for a rank out of range, `DuplicateName` as
    /// [`super::Engine::submit`].
    pub fn submit(&mut self, rank: usize, request: &Request) -> Result<()> {
        let size = self.size();
        let state = self.ranks.get_mut(rank).ok_or_else(|| {
            Error::InvalidArgument(format!("rank {rank} is out of range for {size} ranks"))
        })?;
        let started = cpu_time();
        let result = state.submit(request.meta(), self.now);
        self.submitting[rank] += cpu_time().saturating_sub(started);
        result
    }

    /// Runs one cycle on every rank; what it cost.
    ///
    /// # Errors
    /// `ControlMessage` if the ranks' state machines disagree (a bug).
    pub fn cycle(&mut self) -> Result<CycleCost> {
        Ok(self.step()?.cost)
    }

    /// One cycle: every rank's bit vector, their AND, every rank's reading
    /// of it, the coordinator's round if any rank asked for one, every
    /// rank's plan.
    pub(crate) fn step(&mut self) -> Result<Cycle> {
        self.now += self.cycle_time;
        let now = self.now;
        let size = self.size();
        let mut spent = std::mem::replace(&mut self.submitting, vec![Duration::ZERO; size]);

        let started = cpu_time();
        let due = self.coordinator.wants_round(now);
        spent[0] += cpu_time().saturating_sub(started);
        let vectors: Vec<Vec<u64>> = timed(&mut self.ranks, &mut spent, |r, state| {
            state.start_cycle(now, r == 0 && due)
        });
        let and: Vec<u64> = (0..vectors[0].len())
            .map(|i| vectors.iter().fold(u64::MAX, |a, v| a & v[i]))
            .collect();
        let afters = timed(&mut self.ranks, &mut spent, |_, state| {
            state.on_bits(&and, now)
        });
        let mut cost = CycleCost {
            bits_per_rank: pack_bits(&and, size).len() * 8,
            ..CycleCost::default()
        };
        let mut lists = Vec::with_capacity(size);
        for after in afters {
            match after? {
                AfterBits::Stop => {
                    return Ok(Cycle {
                        plans: Vec::new(),
                        warnings: Vec::new(),
                        stopped: true,
                        cost: cost.spent(spent),
                    })
                }
                AfterBits::Continue(list) => lists.push(list),
            }
        }
        let mut warnings = Vec::new();
        let responses = if lists.iter().all(Option::is_some) {
            let lists: Vec<Vec<u8>> = lists.into_iter().flatten().collect();
            cost.requests = lists.iter().map(Vec::len).sum();
            let started = cpu_time();
            let outcome = self.coordinator.round(&lists, now)?;
            spent[0] += cpu_time().saturating_sub(started);
            cost.round = true;
            cost.responses = outcome.responses.len();
            warnings = outcome.warnings;
            Some(outcome.responses)
        } else if lists.iter().all(Option::is_none) {
            None
        } else {
            return Err(Error::ControlMessage {
                detail: "ranks disagree on whether this cycle has a round".into(),
            });
        };
        let plans = timed(&mut self.ranks, &mut spent, |_, state| {
            state.on_responses(responses.as_deref())
        })
        .into_iter()
        .collect::<Result<Vec<CyclePlan>>>()?;
        cost.planned = plans[0].batches.iter().map(|b| b.responses.len()).sum();
        for (rank, plan) in plans.iter().enumerate() {
            for (name, error) in &plan.failures {
                cost.failed.push((rank, name.clone(), error.to_string()));
            }
        }
        Ok(Cycle {
            plans,
            warnings,
            stopped: false,
            cost: cost.spent(spent),
        })
    }
}

impl CycleCost {
    fn spent(mut self, mut by_rank: Vec<Duration>) -> CycleCost {
        self.coordinator = by_rank[0];
        by_rank.remove(0);
        self.workers = by_rank;
        self
    }
}

/// `call` on every rank in rank order, each call's time added to its rank's.
fn timed<T>(
    ranks: &mut [RankState],
    spent: &mut [Duration],
    mut call: impl FnMut(usize, &mut RankState) -> T,
) -> Vec<T> {
    let mut last = cpu_time();
    let mut out = Vec::with_capacity(ranks.len());
    for (rank, state) in ranks.iter_mut().enumerate() {
        out.push(call(rank, state));
        let now = cpu_time();
        spent[rank] += now.saturating_sub(last);
        last = now;
    }
    out
}

/// CPU time this thread has used.
fn cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
