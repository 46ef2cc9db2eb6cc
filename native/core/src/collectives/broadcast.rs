//! Broadcast: the root's data replaces every other rank's.
//!
//! The data flows down a pipelined chain starting at the root (`root`,
//! `root + 1`, ..., `root - 1`, modulo the size) in chunks of
//! [`CHUNK_BYTES`]: each rank receives a chunk from its predecessor and
//! forwards it to its successor before receiving the next, so for large data
//! all links are busy at once and the time approaches that of one transfer.
//! The chain has an end that only receives, so no cycle of blocked writers
//! can form even though sends run on the calling thread.

use crate::communicator::Communicator;
use crate::error::Result;
use crate::reduce::{as_bytes_mut, Element};
use crate::wire::{Header, Kind};

const KIND: Kind = Kind::Broadcast;

/// Bytes per pipelined step.
const CHUNK_BYTES: usize = 256 * 1024;

impl Communicator {
    /// Replaces `data` on every rank with the root's `data`. All ranks must
    /// pass the same root, element type and length.
    ///
    /// # Errors
    /// `InvalidArgument` when `root` is not a rank of the job; `Mismatch`
    /// when another rank called another collective, root, element type or
    /// length; otherwise as [`Communicator::allreduce`].
    pub fn broadcast<T: Element>(&mut self, data: &mut [T], root: usize) -> Result<()> {
        let n = self.size();
        let Some(root_code) = u32::try_from(root).ok().filter(|_| root < n) else {
            return self.refuse(format!(
                "broadcast root {root} is not a rank of this job of {n} ranks"
            ));
        };
        self.collective(|comm, seq| {
            let header = Header::new(seq, KIND, T::CODE, None, data.len(), root_code);
            comm.agree(&header, KIND)?;
            let r = comm.rank();
            let position = (r + n - root) % n;
            let prev = if position > 0 {
                Some(comm.link((r + n - 1) % n)?)
            } else {
                None
            };
            let next = if position + 1 < n {
                Some(comm.link((r + 1) % n)?)
            } else {
                None
            };
            for chunk in as_bytes_mut(data).chunks_mut(CHUNK_BYTES) {
                if let Some(prev) = prev {
                    prev.recv(chunk, KIND.name())?;
                }
                if let Some(next) = next {
                    next.send(chunk, KIND.name())?;
                }
            }
            Ok(())
        })
    }
}
