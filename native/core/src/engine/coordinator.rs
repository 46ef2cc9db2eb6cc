//! The coordinator: rank 0's table of which rank has submitted what.
//!
//! In a negotiation round every rank sends the coordinator the tensors that
//! became ready on it since its last round ([`RequestList`]); the coordinator
//! adds them to its table, and a name that every rank has now submitted
//! leaves the table as a [`Response`]: `Ready` if the ranks' metadata agree,
//! `Failed` naming the disagreeing ranks if not. Names that some ranks have
//! not submitted stay, and are warned about and eventually failed by the
//! [`StallPolicy`]. The ordered [`ResponseList`] goes back to every rank
//! (Horovod's `controller` on its coordinator rank).
//!
//! Invariant: the order of the responses is decided here, once, and every
//! rank executes them in that order; that is what lets ranks submit in
//! different orders without deadlocking. Sans-IO: bytes in, bytes out, the
//! time passed in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::message::{Failure, ReadyResponse, RequestList, Response, ResponseList};
use super::request::{Operation, TensorMeta};
use super::stall::{StallPolicy, Verdict};

/// A tensor some but not all ranks have submitted.
#[derive(Debug)]
struct Waiting {
    /// `metas[r]` is rank `r`'s submission, once it arrived.
    metas: Vec<Option<TensorMeta>>,
    arrived: usize,
    /// When the first rank submitted it (by that rank's reckoning of age).
    first_seen: Instant,
    last_warned: Option<Instant>,
}

/// A stall worth logging: who has submitted a tensor and who has not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StallReport {
    pub name: String,
    pub submitted: Vec<usize>,
    pub missing: Vec<usize>,
    pub waited: Duration,
}

/// What a negotiation round produced on the coordinator.
#[derive(Debug)]
pub(crate) struct RoundOutcome {
    /// The encoded [`ResponseList`] to broadcast.
    pub responses: Vec<u8>,
    /// Stalls to log.
    pub warnings: Vec<StallReport>,
}

/// Rank 0's negotiation state.
#[derive(Debug)]
pub(crate) struct Coordinator {
    size: usize,
    stall: StallPolicy,
    /// Sorted by name, so stall verdicts come out in a stable order.
    table: BTreeMap<String, Waiting>,
}

impl Coordinator {
    pub fn new(size: usize, stall: StallPolicy) -> Coordinator {
        Coordinator {
            size,
            stall,
            table: BTreeMap::new(),
        }
    }

    /// True when a waiting tensor is due a warning or a failure, so this
    /// cycle needs a round even if no rank has new tensors.
    pub fn wants_round(&self, now: Instant) -> bool {
        self.table
            .values()
            .any(|w| self.stall.verdict(w.first_seen, w.last_warned, now) != Verdict::Wait)
    }

    /// Number of tensors waiting for some ranks.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.table.len()
    }

    /// Takes every rank's encoded [`RequestList`] (`lists[r]` from rank `r`)
    /// and returns the round's responses.
    pub fn round(&mut self, lists: &[Vec<u8>], now: Instant) -> Result<RoundOutcome> {
        if lists.len() != self.size {
            return Err(Error::ControlMessage {
                detail: format!("{} request lists for {} ranks", lists.len(), self.size),
            });
        }
        let mut responses = Vec::new();
        for (rank, bytes) in lists.iter().enumerate() {
            let list = RequestList::decode(bytes)?;
            for (meta, age) in list.requests {
                if let Some(response) = self.add(rank, meta, age, now)? {
                    responses.push(response);
                }
            }
        }
        let mut warnings = Vec::new();
        let mut stalled = Vec::new();
        for (name, waiting) in &mut self.table {
            let verdict = self
                .stall
                .verdict(waiting.first_seen, waiting.last_warned, now);
            if verdict == Verdict::Wait {
                continue;
            }
            let (submitted, missing): (Vec<usize>, Vec<usize>) =
                (0..self.size).partition(|&r| waiting.metas[r].is_some());
            let waited = now.saturating_duration_since(waiting.first_seen);
            if verdict == Verdict::Fail {
                stalled.push(name.clone());
                responses.push(Response::Failed {
                    name: name.clone(),
                    failure: Failure::Stalled { missing, waited },
                });
            } else {
                waiting.last_warned = Some(now);
                warnings.push(StallReport {
                    name: name.clone(),
                    submitted,
                    missing,
                    waited,
                });
            }
        }
        for name in stalled {
            self.table.remove(&name);
        }
        Ok(RoundOutcome {
            responses: ResponseList { responses }.encode(),
            warnings,
        })
    }

    /// Records `rank`'s submission; the response if it was the last one.
    fn add(
        &mut self,
        rank: usize,
        meta: TensorMeta,
        age: Duration,
        now: Instant,
    ) -> Result<Option<Response>> {
        let submitted_at = now.checked_sub(age).unwrap_or(now);
        let size = self.size;
        let name = meta.name.clone();
        let waiting = self.table.entry(name.clone()).or_insert_with(|| Waiting {
            metas: vec![None; size],
            arrived: 0,
            first_seen: submitted_at,
            last_warned: None,
        });
        if waiting.metas[rank].is_some() {
            return Err(Error::ControlMessage {
                detail: format!("rank {rank} sent tensor '{name}' twice"),
            });
        }
        waiting.first_seen = waiting.first_seen.min(submitted_at);
        waiting.metas[rank] = Some(meta);
        waiting.arrived += 1;
        if waiting.arrived < size {
            return Ok(None);
        }
        let Some(waiting) = self.table.remove(&name) else {
            return Ok(None);
        };
        let metas: Vec<TensorMeta> = waiting.metas.into_iter().flatten().collect();
        Ok(Some(decide(name, metas)))
    }
}

/// The response for a name every rank has submitted.
fn decide(name: String, metas: Vec<TensorMeta>) -> Response {
    if let Some(detail) = TensorMeta::disagreement(&metas) {
        return Response::Failed {
            name,
            failure: Failure::Mismatch { detail },
        };
    }
    let first_dims = match metas[0].operation {
        Operation::Allgather => metas
            .iter()
            .map(|m| m.shape.first().copied().unwrap_or(0))
            .collect(),
        _ => Vec::new(),
    };
    let mut metas = metas;
    let meta = metas.swap_remove(0);
    Response::Ready(ReadyResponse { meta, first_dims })
}
