//! Allgather: every rank contributes a block of its own length (zero
//! included) and every rank receives all blocks concatenated in rank order,
//! as Horovod's allgather concatenates along the first dimension.
//!
//! After the header, ranks exchange their block lengths (by recursive
//! doubling beyond a few ranks: `Communicator::allgather_counts`); the blocks then
//! travel around the ring: in step `s` rank `r` forwards block `r - s` to
//! rank `r + 1` and receives block `r - s - 1` from rank `r - 1`, so after
//! `size - 1` steps every rank holds every block, each copied byte for byte.

use super::{blocks, send_recv};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::partition::split_pair;
use crate::reduce::{as_bytes, as_bytes_mut, Element};
use crate::wire::{Header, Kind};

const KIND: Kind = Kind::Allgather;

impl Communicator {
    /// Gathers every rank's `mine` on every rank: returns the blocks of all
    /// ranks concatenated in rank order, and the length of each rank's block.
    /// Ranks may contribute different lengths, zero included, but must all
    /// use the same element type.
    ///
    /// # Errors
    /// `Mismatch` when another rank called another collective or element
    /// type; otherwise as [`Communicator::allreduce`].
    pub fn allgather<T: Element>(&mut self, mine: &[T]) -> Result<(Vec<T>, Vec<usize>)> {
        self.collective(|comm, seq| {
            let header = Header::new(seq, KIND, T::CODE, None, 0, 0);
            comm.agree(&header, KIND)?;
            let counts = comm.allgather_counts(mine.len(), &header, KIND)?;
            let ranges = blocks(&counts).ok_or_else(|| {
                Error::InvalidArgument(format!("allgather of {counts:?} elements is too large"))
            })?;
            let total = ranges.last().map_or(0, |last| last.end);
            let mut gathered = vec![T::ZERO; total];
            let (n, r) = (comm.size(), comm.rank());
            gathered[ranges[r].clone()].copy_from_slice(mine);
            if n > 1 {
                let next = comm.link((r + 1) % n)?;
                let prev = comm.link((r + n - 1) % n)?;
                for step in 0..n - 1 {
                    let send = ranges[(r + n - step) % n].clone();
                    let recv = ranges[(r + n - step - 1) % n].clone();
                    let (outgoing, incoming) = split_pair(&mut gathered, send, recv);
                    send_recv(next, as_bytes(outgoing), prev, as_bytes_mut(incoming), KIND)?;
                }
            }
            Ok((gathered, counts))
        })
    }
}
