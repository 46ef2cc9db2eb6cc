//! Alltoall: every rank sends a block of its data to every rank (itself
//! included) and receives one block from each, concatenated in rank order.
//!
//! `splits[p]` elements go to rank `p`, in rank order through the data. After
//! the header each rank tells each peer how many elements it will send it;
//! the blocks then move in `size - 1` pairwise steps: in step `k` rank `r`
//! sends to rank `r + k` while receiving from rank `r - k`, which is sending
//! to it in the same step.

use super::{blocks, send_recv};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::reduce::{as_bytes, as_bytes_mut, Element};
use crate::wire::{Header, Kind};

const KIND: Kind = Kind::Alltoall;

impl Communicator {
    /// Sends `splits[p]` elements of `data` (in order) to each rank `p` and
    /// returns the blocks received from every rank, concatenated in rank
    /// order, with the length of each. Splits may be zero and may differ
    /// between ranks; all ranks must use the same element type.
    ///
    /// # Errors
    /// `InvalidArgument` when `splits` does not have one entry per rank or
    /// does not add up to `data.len()`; `Mismatch` when another rank called
    /// another collective or element type; otherwise as
    /// [`Communicator::allreduce`].
    pub fn alltoall<T: Element>(
        &mut self,
        data: &[T],
        splits: &[usize],
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let n = self.size();
        if splits.len() != n {
            return self.refuse(format!(
                "alltoall needs one split per rank: got {} splits for {n} ranks",
                splits.len()
            ));
        }
        let sent = match blocks(splits) {
            Some(sent) if sent.last().map_or(0, |last| last.end) == data.len() => sent,
            _ => {
                return self.refuse(format!(
                    "alltoall splits {splits:?} do not add up to the data's {} elements",
                    data.len()
                ))
            }
        };
        self.collective(|comm, seq| {
            comm.agree(&Header::new(seq, KIND, T::CODE, None, 0, 0), KIND)?;
            let counts = comm.exchange_counts(|peer| splits[peer], KIND)?;
            let received = blocks(&counts).ok_or_else(|| {
                Error::InvalidArgument(format!("alltoall of {counts:?} elements is too large"))
            })?;
            let total = received.last().map_or(0, |last| last.end);
            let mut out = vec![T::ZERO; total];
            let r = comm.rank();
            out[received[r].clone()].copy_from_slice(&data[sent[r].clone()]);
            for k in 1..n {
                let (to, from) = ((r + k) % n, (r + n - k) % n);
                send_recv(
                    comm.link(to)?,
                    as_bytes(&data[sent[to].clone()]),
                    comm.link(from)?,
                    as_bytes_mut(&mut out[received[from].clone()]),
                    KIND,
                )?;
            }
            Ok((out, counts))
        })
    }
}
