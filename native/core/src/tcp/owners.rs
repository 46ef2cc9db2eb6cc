//! Allreduce by direct reduce-scatter to owners, then direct allgather: two
//! network hops whatever the number of ranks, for mid-sized messages.
//!
//! Rank `p` owns segment `p` of the data ([`crate::partition::segment`]).
//! In the first phase every rank sends each peer that peer's segment and
//! receives every peer's copy of its own; it then reduces them in rank order.
//! In the second phase it sends its reduced segment to every peer and
//! receives theirs straight into place. Each rank sends and receives
//! `2 (size - 1) / size` of the data, as in the ring, but a message crosses
//! the network twice instead of `2 (size - 1)` times, which is what counts
//! while messages are too small for the ring's pipeline to fill.
//!
//! Invariant: segment `p` is reduced only by rank `p`, always as
//! `((x_0 op x_1) op x_2) ...` in rank order, and then copied byte for byte,
//! so every rank ends bit-identical.

use crate::error::Result;
use crate::mesh::Mesh;
use crate::partition::segment;
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::tcp::pump::{transfer, Flow};
use crate::wire::Header;

const DURING: &str = "allreduce";

/// Allreduce of `data` among the ranks of `mesh` (at least two).
pub(crate) fn allreduce<T: Element>(
    mesh: &Mesh,
    data: &mut [T],
    op: ReduceOp,
    header: &Header,
) -> Result<()> {
    let (n, r, len) = (mesh.size(), mesh.rank(), data.len());
    let mine = segment(len, n, r);
    // Every rank's contribution to segment `mine`, in rank order; ours stays
    // in `data` until the reduction.
    let mut inputs: Vec<Vec<T>> = (0..n)
        .map(|p| vec![T::ZERO; if p == r { 0 } else { mine.len() }])
        .collect();
    {
        let mut flows = Vec::with_capacity(n - 1);
        for (p, input) in inputs.iter_mut().enumerate() {
            if p != r {
                flows.push(Flow::new(
                    mesh.link(p)?,
                    Some(header),
                    as_bytes(&data[segment(len, n, p)]),
                    as_bytes_mut(input),
                ));
            }
        }
        transfer(&mut flows, DURING)?;
    }
    if r == 0 {
        let acc = &mut data[mine.clone()];
        for input in &inputs[1..] {
            T::reduce(acc, input, op);
        }
        if op == ReduceOp::Average {
            T::divide(acc, n);
        }
    } else {
        let (first, rest) = inputs.split_at_mut(1);
        let acc = &mut first[0];
        for p in 1..n {
            let input: &[T] = if p == r {
                &data[mine.clone()]
            } else {
                &rest[p - 1]
            };
            T::reduce(acc, input, op);
        }
        if op == ReduceOp::Average {
            T::divide(acc, n);
        }
        data[mine.clone()].copy_from_slice(acc);
    }
    // Allgather: our reduced segment to everyone, theirs into place.
    let (head, tail) = data.split_at_mut(mine.start);
    let (reduced, tail) = tail.split_at_mut(mine.len());
    let reduced: &[T] = reduced;
    let mut flows = Vec::with_capacity(n - 1);
    let mut rest_head = head;
    let mut rest_tail = tail;
    for p in 0..n {
        if p == r {
            continue;
        }
        let range = segment(len, n, p);
        let into = if p < r {
            let (part, after) = std::mem::take(&mut rest_head).split_at_mut(range.len());
            rest_head = after;
            part
        } else {
            let (part, after) = std::mem::take(&mut rest_tail).split_at_mut(range.len());
            rest_tail = after;
            part
        };
        flows.push(Flow::new(
            mesh.link(p)?,
            None,
            as_bytes(reduced),
            as_bytes_mut(into),
        ));
    }
    transfer(&mut flows, DURING)
}
