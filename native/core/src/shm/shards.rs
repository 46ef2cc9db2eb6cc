//! Reduce-scatter and allgather of *shards* through shared memory, the two
//! halves of an allreduce with work in between: the hierarchical allreduce
//! reduces each shard within the host, lets the shard's owner reduce it
//! across hosts, and gathers the results back ([`crate::communicator::hierarchy`]).
//!
//! Shard `k` of the data is `segment(len, size, k)`, owned by rank `k`. Both
//! halves go in rounds of one slot: in round `c` each shard contributes its
//! `c`-th *piece* (a slot's share of a shard), so every rank has work in
//! every round, whatever the length.
//! - Reduce-scatter round: every rank copies piece `c` of each other rank's
//!   shard into its slot, at that rank's place, and signals; each rank then
//!   reduces its own piece from its data and every other slot, in the order
//!   `rank + 1, rank + 2, ...`. The owner alone reduces a shard, so the
//!   result does not depend on who reads it.
//! - Allgather round: each rank copies its piece `c` into its slot and
//!   signals; every rank copies the others' pieces out.
//!
//! One phase per round; rounds take the two slots in turn as chunks of the
//! allreduce do, so the module's invariant holds across both: a slot is
//! written again only after every rank has signalled the round in between,
//! which each does after it finished reading the slot.

use std::ops::Range;

use super::copy::copy;
use super::ShmTransport;
use crate::error::Result;
use crate::mesh::Mesh;
use crate::partition::segment as shard;
use crate::reduce::{Element, ReduceOp};
use crate::wire::Header;

impl ShmTransport {
    /// Leaves in this rank's shard of `data` that shard reduced with `op`
    /// across the ranks; the rest of `data` is unchanged. `Average` is not
    /// divided here (the caller divides by the ranks of the whole reduction).
    pub(crate) fn reduce_scatter_shards<T: Element>(
        &mut self,
        mesh: &Mesh,
        data: &mut [T],
        op: ReduceOp,
        header: &Header,
    ) -> Result<()> {
        const DURING: &str = "reducescatter";
        let (n, me) = (self.size, self.rank);
        let piece = self.piece_elems::<T>();
        self.publish(header);
        for c in 0..rounds(data.len(), n, piece) {
            let which = self.next_slot();
            for k in (0..n).filter(|&k| k != me) {
                let theirs = piece_of(data.len(), n, k, c, piece);
                let at = k * piece..k * piece + theirs.len();
                // SAFETY (slot accesses below): every region lies in a slot
                // (`n` pieces fill at most one), and by the module's
                // invariant no rank writes a slot while it is read.
                copy(
                    unsafe { self.region_mut::<T>(me, which, at) },
                    &data[theirs],
                );
            }
            self.complete_phase(mesh, header, DURING, c == 0)?;
            let mine = piece_of(data.len(), n, me, c, piece);
            let at = me * piece..me * piece + mine.len();
            let acc = &mut data[mine];
            for step in 1..n {
                let k = (me + step) % n;
                T::reduce(acc, unsafe { self.region::<T>(k, which, at.clone()) }, op);
            }
        }
        Ok(())
    }

    /// Copies every other rank's shard of `data` from that rank's `data`:
    /// afterwards every rank holds every shard as its owner left it.
    pub(crate) fn allgather_shards<T: Element>(
        &mut self,
        mesh: &Mesh,
        data: &mut [T],
        header: &Header,
    ) -> Result<()> {
        const DURING: &str = "allgather";
        let (n, me) = (self.size, self.rank);
        let piece = self.piece_elems::<T>();
        self.publish(header);
        for c in 0..rounds(data.len(), n, piece) {
            let which = self.next_slot();
            let mine = piece_of(data.len(), n, me, c, piece);
            // SAFETY: as in `reduce_scatter_shards`; a slot holds one piece.
            copy(
                unsafe { self.region_mut::<T>(me, which, 0..mine.len()) },
                &data[mine],
            );
            self.complete_phase(mesh, header, DURING, c == 0)?;
            for k in (0..n).filter(|&k| k != me) {
                let theirs = piece_of(data.len(), n, k, c, piece);
                let len = theirs.len();
                copy(&mut data[theirs], unsafe {
                    self.region::<T>(k, which, 0..len)
                });
            }
        }
        Ok(())
    }

    /// Elements of a piece: a slot holds one piece of every shard.
    fn piece_elems<T: Element>(&self) -> usize {
        (self.segment.slot_bytes() / std::mem::size_of::<T>() / self.size).max(1)
    }
}

/// Rounds for shards of `len` elements among `n` ranks in pieces of
/// `piece`: enough for the longest shard (the first), at least one so that
/// the headers are checked.
fn rounds(len: usize, n: usize, piece: usize) -> usize {
    shard(len, n, 0).len().div_ceil(piece).max(1)
}

/// Elements of piece `c` of shard `k` (empty once the shard is done).
fn piece_of(len: usize, n: usize, k: usize, c: usize, piece: usize) -> Range<usize> {
    let whole = shard(len, n, k);
    let start = (whole.start + c * piece).min(whole.end);
    start..(start + piece).min(whole.end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_every_shard_once_in_rounds() {
        for (len, n, piece) in [(10, 3, 2), (7, 4, 5), (2, 3, 1), (0, 2, 4)] {
            let mut seen = vec![0; len];
            for c in 0..rounds(len, n, piece) {
                for k in 0..n {
                    let p = piece_of(len, n, k, c, piece);
                    assert!(p.len() <= piece);
                    assert!(shard(len, n, k).contains(&p.start) || p.is_empty());
                    p.for_each(|i| seen[i] += 1);
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{len} {n} {piece}: {seen:?}");
        }
    }
}
