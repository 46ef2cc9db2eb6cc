//! Reducescatter: the element-wise reduction of all ranks' data, of which
//! rank `r` keeps segment `r`.
//!
//! The data is split into `size` contiguous segments as allreduce splits it
//! (the first `len % size` segments one element longer, as Horovod gives the
//! extra rows to the first ranks). This is the first half of ring allreduce:
//! in step `s` rank `r` sends its partial sum of segment `r - s - 1` to rank
//! `r + 1` and reduces segment `r - s - 2` arriving from rank `r - 1` into
//! its own, so after `size - 1` steps segment `r` holds every rank's
//! contribution.

use super::send_recv;
use crate::communicator::Communicator;
use crate::error::Result;
use crate::partition::segment;
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::wire::{Header, Kind};

const KIND: Kind = Kind::Reducescatter;

impl Communicator {
    /// Reduces `data` element-wise across all ranks with `op` and returns
    /// this rank's segment of the result: segment `r` of `size` near-equal
    /// contiguous segments, the first `len % size` one element longer. All
    /// ranks must pass the same element type, length and operation.
    ///
    /// # Errors
    /// `Mismatch` when another rank called another collective, element type,
    /// length or operation; otherwise as [`Communicator::allreduce`].
    pub fn reducescatter<T: Element>(&mut self, data: &[T], op: ReduceOp) -> Result<Vec<T>> {
        self.collective(|comm, seq| {
            comm.agree(
                &Header::new(seq, KIND, T::CODE, Some(op), data.len(), 0),
                KIND,
            )?;
            let (n, r, len) = (comm.size(), comm.rank(), data.len());
            let mut work = data.to_vec();
            if n > 1 {
                let next = comm.link((r + 1) % n)?;
                let prev = comm.link((r + n - 1) % n)?;
                let mut scratch = vec![T::ZERO; segment(len, n, 0).len()];
                for step in 0..n - 1 {
                    let send = segment(len, n, (r + 2 * n - step - 1) % n);
                    let recv = segment(len, n, (r + 2 * n - step - 2) % n);
                    let incoming = &mut scratch[..recv.len()];
                    send_recv(
                        next,
                        as_bytes(&work[send]),
                        prev,
                        as_bytes_mut(incoming),
                        KIND,
                    )?;
                    T::reduce(&mut work[recv], incoming, op);
                }
            }
            let mut mine = work[segment(len, n, r)].to_vec();
            if op == ReduceOp::Average {
                T::divide(&mut mine, n);
            }
            Ok(mine)
        })
    }
}
