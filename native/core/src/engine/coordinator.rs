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
//! Join (Horovod's): a rank that submits [`Operation::Join`] counts as
//! having submitted every other tensor until all ranks have joined, so the
//! others' collectives complete without it (its engine stands in for it);
//! the join itself waits, without stalling, for every rank and answers with
//! the rank that joined last (in `first_dims`).
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
    /// `joined[r]`: rank `r` has submitted a join that is not complete.
    joined: Vec<bool>,
    /// How many of `joined` are set.
    joined_ranks: usize,
    /// The rank whose join arrived last.
    last_joined: usize,
}

impl Coordinator {
    pub fn new(size: usize, stall: StallPolicy) -> Coordinator {
        Coordinator {
            size,
            stall,
            table: BTreeMap::new(),
            joined: vec![false; size],
            joined_ranks: 0,
            last_joined: 0,
        }
    }

    /// True when a waiting tensor is due a warning or a failure, so this
    /// cycle needs a round even if no rank has new tensors.
    pub fn wants_round(&self, now: Instant) -> bool {
        self.table.values().any(|w| {
            !w.is_join() && self.stall.verdict(w.first_seen, w.last_warned, now) != Verdict::Wait
        })
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
                responses.extend(self.add(rank, meta, age, now)?);
            }
        }
        let mut warnings = Vec::new();
        let mut stalled = Vec::new();
        for (name, waiting) in &mut self.table {
            if waiting.is_join() {
                continue; // A rank may wait in join as long as the others train.
            }
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

    /// Records `rank`'s submission; the responses it completes (its own if
    /// it was the last one; for a join, those that waited only for `rank`).
    fn add(
        &mut self,
        rank: usize,
        meta: TensorMeta,
        age: Duration,
        now: Instant,
    ) -> Result<Vec<Response>> {
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
        let joins = meta.operation == Operation::Join;
        waiting.metas[rank] = Some(meta);
        waiting.arrived += 1;
        if joins {
            self.joined_ranks += usize::from(!self.joined[rank]);
            self.joined[rank] = true;
            self.last_joined = rank;
            let everyone = waiting.arrived == size;
            // The ranks still training no longer wait for this one (nor, once
            // everyone has joined, for anyone: tensors submitted before a
            // join complete before it).
            let complete: Vec<String> = self
                .table
                .iter()
                .filter(|(_, w)| !w.is_join() && w.complete(&self.joined, self.joined_ranks))
                .map(|(n, _)| n.clone())
                .collect();
            let mut responses: Vec<Response> = complete
                .into_iter()
                .filter_map(|n| self.finish(n))
                .collect();
            if everyone {
                self.joined.fill(false);
                self.joined_ranks = 0;
                let metas = self
                    .table
                    .remove(&name)
                    .map(|w| w.metas)
                    .unwrap_or_default();
                responses.push(decide(name, metas, &[self.last_joined]));
            }
            return Ok(responses);
        }
        if !waiting.complete(&self.joined, self.joined_ranks) {
            return Ok(Vec::new());
        }
        Ok(self.finish(name).into_iter().collect())
    }

    /// The response for a waiting tensor every rank has submitted or joined.
    fn finish(&mut self, name: String) -> Option<Response> {
        let waiting = self.table.remove(&name)?;
        let joined: Vec<usize> = (0..self.size)
            .filter(|&r| waiting.metas[r].is_none())
            .collect();
        if let Some(detail) = unsupported_while_joined(&waiting, &joined) {
            return Some(Response::Failed {
                name,
                failure: Failure::Mismatch { detail },
            });
        }
        Some(decide(name, waiting.metas, &[]))
    }
}

impl Waiting {
    fn is_join(&self) -> bool {
        self.metas
            .iter()
            .flatten()
            .any(|m| m.operation == Operation::Join)
    }

    /// Every rank has submitted it or has joined. Scans the ranks only
    /// while some have joined: on every submission, a scan would make a
    /// round quadratic in the ranks (4 s at 1,024 ranks for 161 tensors).
    fn complete(&self, joined: &[bool], joined_ranks: usize) -> bool {
        if self.arrived == 0 || joined_ranks == 0 {
            return self.arrived == self.metas.len();
        }
        self.metas
            .iter()
            .zip(joined)
            .all(|(meta, &joined)| meta.is_some() || joined)
    }
}

/// Why a tensor cannot run with `joined` ranks standing in, if it cannot.
/// As in Horovod, only allreduces (and joins and barriers) run while a rank
/// has joined: a joined rank has no rows to gather, no part to exchange and
/// no slice to receive, and Horovod's users and tests expect the refusal.
fn unsupported_while_joined(waiting: &Waiting, joined: &[usize]) -> Option<String> {
    if joined.is_empty() {
        return None;
    }
    let meta = waiting.metas.iter().flatten().next()?;
    if meta.on_device {
        return Some(format!(
            "a GPU tensor's {} cannot run while ranks {joined:?} have joined (they have no device memory to stand in with)",
            meta.operation.kind()
        ));
    }
    let refused = match meta.operation {
        Operation::Allgather => {
            "Allgather is not supported with Join at this time \
            (specify sparse_as_dense=True if using DistributedOptimizer)"
        }
        Operation::Broadcast { .. } => "Broadcast is not supported with Join at this time",
        Operation::Alltoall { .. } => "Alltoall is not supported with Join at this time",
        Operation::Reducescatter { .. } => "Reducescatter is not supported with Join at this time",
        _ => return None,
    };
    Some(format!("{refused}: ranks {joined:?} have joined"))
}

/// The response for a name every rank has submitted (`metas[r]` is rank
/// `r`'s, `None` for a rank that has joined and stands in). `join_result`
/// becomes a join's `first_dims`.
fn decide(name: String, metas: Vec<Option<TensorMeta>>, join_result: &[usize]) -> Response {
    let Some(first) = metas.iter().flatten().next() else {
        return Response::Failed {
            name,
            failure: Failure::Mismatch {
                detail: "no rank submitted it".into(),
            },
        };
    };
    // A joined rank agrees with everyone: it takes the first submitter's metadata.
    let filled: Vec<&TensorMeta> = metas.iter().map(|m| m.as_ref().unwrap_or(first)).collect();
    if let Some(detail) = TensorMeta::disagreement(&filled) {
        return Response::Failed {
            name,
            failure: Failure::Mismatch { detail },
        };
    }
    let first_dims = match first.operation {
        // Every rank submitted an allgather: one never runs while a rank has joined.
        Operation::Allgather => metas
            .iter()
            .map(|m| {
                m.as_ref()
                    .and_then(|m| m.shape.first().copied())
                    .unwrap_or(0)
            })
            .collect(),
        Operation::Join => join_result.to_vec(),
        _ => Vec::new(),
    };
    Response::Ready(ReadyResponse {
        meta: first.clone(),
        first_dims,
    })
}
