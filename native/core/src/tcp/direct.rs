//! Allreduce of small messages by direct exchange: every rank sends its
//! header and data to every other rank as one message and reduces all the
//! inputs itself, in rank order: one network hop instead of two or more.
//!
//! Invariant: a message is at most [`DIRECT_MAX`] bytes plus the header,
//! far below any TCP buffer, so the blocking sends, all issued before the
//! first receive, can never block; and every rank computes the same
//! reduction of the same inputs in the same order, so the results are
//! bit-identical.

use crate::error::Result;
use crate::mesh::Mesh;
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::wire::{Header, HEADER_LEN};

/// Messages up to this many bytes (with the header, at most 4 KiB) go by
/// direct exchange.
pub(crate) const DIRECT_MAX: usize = 4096 - HEADER_LEN;

const DURING: &str = "allreduce";

/// Allreduce of `data` (at most [`DIRECT_MAX`] bytes) among the ranks of
/// `mesh`.
pub(crate) fn allreduce<T: Element>(
    mesh: &Mesh,
    data: &mut [T],
    op: ReduceOp,
    header: &Header,
) -> Result<()> {
    debug_assert!(std::mem::size_of_val(data) <= DIRECT_MAX);
    let (n, r, len) = (mesh.size(), mesh.rank(), data.len());
    let mut message = header.encode().to_vec();
    message.extend_from_slice(as_bytes(data));
    for step in 1..n {
        mesh.link((r + step) % n)?.send(&message, DURING)?;
    }
    let mut inputs = vec![T::ZERO; n * len];
    inputs[r * len..(r + 1) * len].copy_from_slice(data);
    for step in 1..n {
        let from = (r + n - step) % n;
        let link = mesh.link(from)?;
        link.receive_header(header, DURING)?;
        link.recv(
            as_bytes_mut(&mut inputs[from * len..(from + 1) * len]),
            DURING,
        )?;
    }
    data.copy_from_slice(&inputs[..len]);
    for k in 1..n {
        T::reduce(data, &inputs[k * len..(k + 1) * len], op);
    }
    if op == ReduceOp::Average {
        T::divide(data, n);
    }
    Ok(())
}
