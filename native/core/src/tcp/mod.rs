//! Allreduce over TCP, for ranks on several hosts (or `TransportPolicy::Tcp`).
//!
//! Four algorithms, chosen by message size and job size so that every rank
//! picks the same one (all ranks reduce the same number of bytes):
//! - up to [`direct::DIRECT_MAX`] bytes, [`direct`] exchange: one hop, every
//!   rank reduces everything;
//! - up to [`OWNERS_MAX`] bytes, [`owners`]: direct reduce-scatter to the
//!   segment owners, then direct allgather: two hops, ring traffic;
//! - both only up to [`DIRECT_RANKS_MAX`] ranks, since every rank talks to
//!   every other; beyond, [`doubling`] (recursive doubling: log2 N rounds
//!   with one partner each);
//! - larger, the pipelined [`ring`]: bandwidth-optimal, and its stream
//!   keeps every link busy however many ranks there are.
//!
//! The last two move bytes with the non-blocking loop of [`pump`], on the
//! calling thread (direct messages are too small to ever block). Invariant: each element of the result is reduced by one
//! rank in one fixed order (or by every rank in the same order), so all
//! ranks end bit-identical; and the header goes ahead of the data on every
//! connection, so ranks calling different collectives fail with `Mismatch`
//! before any of their data is used.

pub(crate) mod direct;
pub(crate) mod doubling;
pub(crate) mod owners;
pub(crate) mod pump;
pub(crate) mod ring;

use crate::error::Result;
use crate::mesh::Mesh;
use crate::mesh::DIRECT_RANKS_MAX;
use crate::reduce::{Element, ReduceOp};
use crate::wire::Header;

/// Messages up to this many bytes use [`owners`]; larger ones the [`ring`].
/// Measured on loopback with 2-4 ranks: at 1 MiB the sliced ring is ahead,
/// at 64 KiB the owners' two hops.
pub(crate) const OWNERS_MAX: usize = 512 << 10;

/// Allreduce of `data` among the ranks of `mesh` (at least two) over TCP.
pub(crate) fn allreduce<T: Element>(
    mesh: &Mesh,
    data: &mut [T],
    op: ReduceOp,
    header: &Header,
) -> Result<()> {
    let bytes = std::mem::size_of_val(data);
    if bytes <= OWNERS_MAX && mesh.size() > DIRECT_RANKS_MAX {
        doubling::allreduce(mesh, data, op, header)
    } else if bytes <= direct::DIRECT_MAX {
        direct::allreduce(mesh, data, op, header)
    } else if bytes <= OWNERS_MAX {
        owners::allreduce(mesh, data, op, header)
    } else {
        let (n, r) = (mesh.size(), mesh.rank());
        let ring = ring::Ring {
            rank: r,
            size: n,
            next: mesh.link((r + 1) % n)?,
            prev: mesh.link((r + n - 1) % n)?,
        };
        ring::allreduce(&ring, data, op, header)
    }
}
