//! One rank's side of the negotiation, as a pure state machine.
//!
//! Each cycle every rank goes through the same three steps, in lockstep with
//! the others:
//!
//! 1. [`RankState::start_cycle`] returns a bit vector: a status word, one
//!    "ready" bit per response-cache position for the cached tensors this
//!    rank has ready, and one "still valid" bit per position (cleared for a
//!    cached entry this rank found stale or whose tensor has waited too
//!    long). The transport ANDs the vectors of all ranks.
//! 2. [`RankState::on_bits`] reads the AND: a ready bit set everywhere means
//!    that cached tensor is ready on every rank; a cleared valid bit on any
//!    rank erases that entry on every rank; a cleared status bit on any rank
//!    means someone has tensors the coordinator has not seen (or the
//!    coordinator has stalls to report), so this cycle has a negotiation
//!    round, for which it returns this rank's [`RequestList`]. In the steady
//!    state of training nothing is new and the AND is all a cycle costs.
//! 3. [`RankState::on_responses`] takes the coordinator's [`ResponseList`]
//!    (if there was a round) and returns the cycle's [`CyclePlan`]: the
//!    cached-ready tensors in position order, then the negotiated ones in the
//!    coordinator's order, fused into batches; and the tensors that failed.
//!
//! A rank that has joined (submitted [`Operation::Join`]) stands in for
//! tensors it never submitted: it asks for a round every cycle and clears
//! every "still valid" bit, so while it waits the cache is empty on every
//! rank and each tensor goes through the coordinator, which counts the
//! joined rank in; the plan then holds responses this rank has no data for,
//! and the engine's thread supplies it.
//!
//! Invariant: every rank executes the same batches in the same order. It
//! holds because the plan is a pure function of the AND result, the
//! broadcast response list and the response cache, and the cache is itself
//! changed only by those (see `response_cache`). Sans-IO: no sockets, no
//! clock; instants are passed in.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::fusion::{self, Batch};
use super::message::{ReadyResponse, RequestList, Response, ResponseList};
use super::request::{Operation, TensorMeta};
use super::response_cache::{Lookup, ResponseCache};

/// Status bit: set when this rank has nothing for the coordinator.
const NOTHING_NEW: u64 = 1 << 0;
/// Status bit: set while this rank wants to keep running.
const KEEP_RUNNING: u64 = 1 << 1;

/// Where a submitted tensor is in the negotiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// To be sent to the coordinator in the next round.
    Unsent,
    /// Sent; waiting for the coordinator's response.
    Sent,
    /// Cached at this position: announced with its ready bit each cycle.
    Cached(usize),
}

#[derive(Debug)]
struct Pending {
    meta: TensorMeta,
    submitted: Instant,
    stage: Stage,
}

/// What step 2 decided.
#[derive(Debug, PartialEq)]
pub(crate) enum AfterBits {
    /// Some rank asked to shut down: every rank stops after this cycle and
    /// executes nothing more.
    Stop,
    /// Carry on; with this rank's encoded [`RequestList`] when the cycle has
    /// a negotiation round.
    Continue(Option<Vec<u8>>),
}

/// What a cycle executes and fails on this rank.
#[derive(Debug, Default)]
pub(crate) struct CyclePlan {
    /// Batches to execute, in order.
    pub batches: Vec<Batch>,
    /// Tensors pending on this rank that failed, with the error.
    pub failures: Vec<(String, Error)>,
    /// Failures of tensors this rank never submitted (to log).
    pub others_failed: Vec<Error>,
}

/// One rank's negotiation state.
#[derive(Debug)]
pub(crate) struct RankState {
    rank: usize,
    cache: ResponseCache,
    fusion_threshold: usize,
    /// Cached tensors waiting longer than this go back to the coordinator.
    demote_after: Option<Duration>,
    pending: HashMap<String, Pending>,
    /// Names of `Unsent` tensors, in submission order.
    unsent: Vec<String>,
    /// Cache positions this rank wants erased in the next cycle.
    invalidate: BTreeSet<usize>,
    shutting_down: bool,
    /// This rank has submitted a join that has not completed.
    joined: bool,
    /// Cached tensors ready everywhere, found in step 2 of this cycle.
    cached_ready: Vec<ReadyResponse>,
}

impl RankState {
    pub fn new(
        rank: usize,
        cache_capacity: usize,
        fusion_threshold: usize,
        demote_after: Option<Duration>,
    ) -> RankState {
        RankState {
            rank,
            cache: ResponseCache::new(cache_capacity),
            fusion_threshold,
            demote_after,
            pending: HashMap::new(),
            unsent: Vec::new(),
            invalidate: BTreeSet::new(),
            shutting_down: false,
            joined: false,
            cached_ready: Vec::new(),
        }
    }

    /// Number of 64-bit words of the bit vector.
    pub fn words(&self) -> usize {
        1 + 2 * self.cache.capacity().div_ceil(64)
    }

    /// Number of tensors submitted and not yet planned or failed.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Accepts a tensor submitted at `now`.
    ///
    /// # Errors
    /// `DuplicateName` if a tensor of that name is already in flight.
    pub fn submit(&mut self, meta: TensorMeta, now: Instant) -> Result<()> {
        if self.pending.contains_key(&meta.name) {
            return Err(Error::DuplicateName { name: meta.name });
        }
        let stage = match self.cache.lookup(self.rank, &meta) {
            Lookup::Hit(position) => Stage::Cached(position),
            Lookup::Conflict(position) => {
                self.invalidate.insert(position);
                Stage::Unsent
            }
            Lookup::Miss => Stage::Unsent,
        };
        if stage == Stage::Unsent {
            self.unsent.push(meta.name.clone());
        }
        if meta.operation == Operation::Join {
            self.joined = true;
        }
        let name = meta.name.clone();
        self.pending.insert(
            name,
            Pending {
                meta,
                submitted: now,
                stage,
            },
        );
        Ok(())
    }

    /// Asks every rank to stop at the next cycle.
    pub fn request_shutdown(&mut self) {
        self.shutting_down = true;
    }

    /// Whether this rank asked every rank to stop.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Step 1: this rank's bit vector. `coordinator_due` is set on the
    /// coordinator's rank when it has stalls to report.
    pub fn start_cycle(&mut self, now: Instant, coordinator_due: bool) -> Vec<u64> {
        let per_set = self.cache.capacity().div_ceil(64);
        let mut words = vec![0u64; self.words()];
        let mut status = 0;
        if self.unsent.is_empty() && !coordinator_due && !self.joined {
            status |= NOTHING_NEW;
        }
        if !self.shutting_down {
            status |= KEEP_RUNNING;
        }
        words[0] = status;
        for pending in self.pending.values() {
            if let Stage::Cached(position) = pending.stage {
                let waited = now.saturating_duration_since(pending.submitted);
                if self.demote_after.is_some_and(|limit| waited >= limit) {
                    self.invalidate.insert(position);
                } else {
                    set_bit(&mut words[1..1 + per_set], position);
                }
            }
        }
        let valid = &mut words[1 + per_set..];
        for position in 0..self.cache.capacity() {
            if !self.invalidate.contains(&position) && !self.joined {
                set_bit(valid, position);
            }
        }
        // A position this rank invalidates is never also announced ready.
        for &position in &self.invalidate {
            clear_bit(&mut words[1..1 + per_set], position);
        }
        words
    }

    /// Step 2: reads the AND of every rank's bit vector.
    pub fn on_bits(&mut self, and: &[u64], now: Instant) -> Result<AfterBits> {
        if and.len() != self.words() {
            return Err(Error::ControlMessage {
                detail: format!(
                    "bit vector of {} words, expected {}",
                    and.len(),
                    self.words()
                ),
            });
        }
        self.invalidate.clear();
        if and[0] & KEEP_RUNNING == 0 {
            return Ok(AfterBits::Stop);
        }
        let per_set = self.cache.capacity().div_ceil(64);
        let ready = &and[1..1 + per_set];
        let valid = &and[1 + per_set..];
        for position in 0..self.cache.capacity() {
            if !bit(valid, position) {
                self.cache.erase(position);
            }
        }
        let mut cached_ready = Vec::new();
        for position in (0..self.cache.capacity()).filter(|&p| bit(ready, p)) {
            let Some(response) = self.cache.get(position).cloned() else {
                return Err(Error::ControlMessage {
                    detail: format!("cache position {position} is ready but empty"),
                });
            };
            if self.pending.remove(&response.meta.name).is_none() {
                return Err(Error::ControlMessage {
                    detail: format!(
                        "cached tensor '{}' is ready everywhere but not pending here",
                        response.meta.name
                    ),
                });
            }
            self.cache.touch(position);
            cached_ready.push(response);
        }
        self.cached_ready = cached_ready;
        self.revalidate_cached();
        if and[0] & NOTHING_NEW != 0 {
            return Ok(AfterBits::Continue(None));
        }
        let mut requests = Vec::with_capacity(self.unsent.len());
        for name in self.unsent.drain(..) {
            if let Some(pending) = self.pending.get_mut(&name) {
                pending.stage = Stage::Sent;
                let age = now.saturating_duration_since(pending.submitted);
                requests.push((pending.meta.clone(), age));
            }
        }
        Ok(AfterBits::Continue(Some(RequestList { requests }.encode())))
    }

    /// Step 3: the cycle's plan, from the coordinator's encoded response
    /// list when the cycle had a round.
    pub fn on_responses(&mut self, responses: Option<&[u8]>) -> Result<CyclePlan> {
        let mut ready = std::mem::take(&mut self.cached_ready);
        let mut plan = CyclePlan::default();
        let list = match responses {
            Some(bytes) => ResponseList::decode(bytes)?,
            None => ResponseList::default(),
        };
        for response in list.responses {
            match response {
                Response::Ready(response) => {
                    if response.meta.operation == Operation::Join {
                        self.joined = false;
                    }
                    // A joined rank stands in for tensors it never submitted.
                    if self.pending.remove(&response.meta.name).is_none() && !self.joined {
                        return Err(Error::ControlMessage {
                            detail: format!(
                                "tensor '{}' is ready everywhere but not pending here",
                                response.meta.name
                            ),
                        });
                    }
                    self.cache.put(response.clone());
                    ready.push(response);
                }
                Response::Failed { name, failure } => {
                    let error = failure.to_error(&name);
                    if self.pending.remove(&name).is_some() {
                        self.unsent.retain(|n| *n != name);
                        plan.failures.push((name, error));
                    } else {
                        plan.others_failed.push(error);
                    }
                }
            }
        }
        // Puts may have evicted entries that tensors here were waiting on.
        self.revalidate_cached();
        plan.batches = fusion::plan(ready, self.fusion_threshold);
        Ok(plan)
    }

    /// Sends cached tensors whose entry is gone (erased or evicted) through
    /// the coordinator instead.
    fn revalidate_cached(&mut self) {
        let mut demoted = Vec::new();
        for (name, pending) in &mut self.pending {
            if let Stage::Cached(position) = pending.stage {
                if self.cache.lookup(self.rank, &pending.meta) != Lookup::Hit(position) {
                    pending.stage = Stage::Unsent;
                    demoted.push((pending.submitted, name.clone()));
                }
            }
        }
        // Keep the submission order (and make it independent of the map's).
        demoted.sort();
        self.unsent
            .extend(demoted.into_iter().map(|(_, name)| name));
    }
}

fn set_bit(words: &mut [u64], position: usize) {
    words[position / 64] |= 1 << (position % 64);
}

fn clear_bit(words: &mut [u64], position: usize) {
    words[position / 64] &= !(1 << (position % 64));
}

fn bit(words: &[u64], position: usize) -> bool {
    words[position / 64] & (1 << (position % 64)) != 0
}
