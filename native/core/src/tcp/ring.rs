//! Pipelined ring allreduce: reduce-scatter then allgather as one stream.
//!
//! The data is split into `size` contiguous segments
//! ([`crate::communicator::segment`]). In reduce-scatter step `s` rank `r`
//! sends segment `r - s` to rank `r + 1` and reduces segment `r - s - 1`,
//! arriving from rank `r - 1`, into its own data; after `size - 1` steps it
//! owns segment `r + 1` fully reduced. In allgather step `t` it forwards
//! segment `r + 1 - t` and stores segment `r - t`.
//!
//! What rank `r` sends in step `k + 1` is exactly what it received in step
//! `k` (after reducing it), so its whole outgoing stream is its own segment
//! `r` followed by its incoming stream minus the last step. The loop
//! ([`allreduce`]) exploits that: every byte received and reduced may be
//! sent on at once, so sending, receiving and reducing overlap and a step
//! never waits for the previous one to finish. Reduce-scatter bytes land in
//! a small scratch buffer and are reduced as whole elements arrive;
//! allgather bytes are received straight into place.
//!
//! Invariant: every element is reduced by one fixed chain of ranks in one
//! fixed order, then copied byte for byte, so all ranks end bit-identical
//! however the stream happens to be cut into reads and writes.

use std::ops::Range;

use crate::communicator::segment;
use crate::error::Result;
use crate::link::Link;
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::tcp::pump::{wait, HeaderSwap, Want};
use crate::wire::Header;

/// Bytes of the scratch buffer reduce-scatter data is received into: the
/// most reduced at once, small enough to stay in the cache.
const SCRATCH_BYTES: usize = 256 << 10;

const DURING: &str = "allreduce";

/// This rank's place in the ring.
pub(crate) struct Ring<'a> {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// Link to rank `rank + 1`, which this rank sends to.
    pub(crate) next: &'a Link,
    /// Link to rank `rank - 1`, which this rank receives from.
    pub(crate) prev: &'a Link,
}

/// A position in a stream of steps, each a range of elements.
struct Cursor {
    /// Index of the current step.
    step: usize,
    /// Bytes of the current step done.
    offset: usize,
    /// Bytes of all steps done.
    total: usize,
}

impl Cursor {
    fn new() -> Cursor {
        Cursor {
            step: 0,
            offset: 0,
            total: 0,
        }
    }

    /// Records `n` more bytes done and moves past finished (or empty) steps.
    fn advance(&mut self, n: usize, steps: &[Range<usize>], elem: usize) {
        self.offset += n;
        self.total += n;
        while self.step < steps.len() && self.offset == steps[self.step].len() * elem {
            self.step += 1;
            self.offset = 0;
        }
    }
}

/// Allreduce of `data` around `ring` (at least two ranks). The header goes
/// ahead of the data, and the previous rank's is checked before any of its
/// data is used.
pub(crate) fn allreduce<T: Element>(
    ring: &Ring<'_>,
    data: &mut [T],
    op: ReduceOp,
    header: &Header,
) -> Result<()> {
    let (n, r, len) = (ring.size, ring.rank, data.len());
    let elem = std::mem::size_of::<T>();
    let seg = |i: usize| segment(len, n, i % n);
    // Step k of the outgoing stream; step k of the incoming one is step k + 1
    // of the outgoing, and the last incoming step is the last allgather.
    let sends: Vec<Range<usize>> = (0..n - 1)
        .map(|s| seg(r + n - s))
        .chain((0..n - 1).map(|t| seg(r + 1 + n - t)))
        .collect();
    let recvs: Vec<Range<usize>> = sends[1..]
        .iter()
        .cloned()
        .chain(std::iter::once(seg(r + 2)))
        .collect();
    let reducing = n - 1;
    let own = sends[0].len() * elem;
    let (mut out, mut inc) = (Cursor::new(), Cursor::new());
    out.advance(0, &sends, elem);
    inc.advance(0, &recvs, elem);
    let mut swap = HeaderSwap::new(header);
    let largest = segment(len, n, 0).len();
    let mut scratch = vec![T::ZERO; largest.clamp(1, SCRATCH_BYTES / elem)];
    let mut fill = 0;
    loop {
        let mut moved = false;
        // Send what has been received and reduced, after our own segment.
        let ready = own + inc.total;
        if !swap.pushed() {
            moved |= swap.push(ring.next, DURING)?;
        } else if out.step < sends.len() && out.total < ready {
            let bytes = as_bytes(&data[sends[out.step].clone()]);
            let end = bytes.len().min(out.offset + ready - out.total);
            let sent = ring.next.try_send(&bytes[out.offset..end], DURING)?;
            out.advance(sent, &sends, elem);
            moved |= sent > 0;
        }
        // Receive: the header, then reduce-scatter steps, then allgather.
        if !swap.pulled() {
            moved |= swap.pull(ring.prev, DURING)?;
        } else if inc.step < reducing {
            let range = recvs[inc.step].clone();
            let want = (range.len() * elem - inc.offset).min(scratch.len() * elem);
            let got = ring
                .prev
                .try_recv(&mut as_bytes_mut(&mut scratch)[fill..want], DURING)?;
            fill += got;
            let whole = fill / elem;
            if whole > 0 {
                let at = range.start + inc.offset / elem;
                let into = &mut data[at..at + whole];
                T::reduce(into, &scratch[..whole], op);
                if op == ReduceOp::Average && inc.step == reducing - 1 {
                    T::divide(into, n);
                }
                as_bytes_mut(&mut scratch).copy_within(whole * elem..fill, 0);
                fill -= whole * elem;
                inc.advance(whole * elem, &recvs, elem);
            }
            moved |= got > 0;
        } else if inc.step < recvs.len() {
            let range = recvs[inc.step].clone();
            let got = ring
                .prev
                .try_recv(&mut as_bytes_mut(&mut data[range])[inc.offset..], DURING)?;
            inc.advance(got, &recvs, elem);
            moved |= got > 0;
        }
        let sending = !swap.pushed() || (out.step < sends.len() && out.total < own + inc.total);
        let receiving = !swap.pulled() || inc.step < recvs.len();
        if !sending && !receiving {
            debug_assert_eq!(out.step, sends.len(), "everything received, not all sent");
            return Ok(());
        }
        if !moved {
            wait(
                &[
                    Want {
                        link: ring.next,
                        read: false,
                        write: sending,
                    },
                    Want {
                        link: ring.prev,
                        read: receiving,
                        write: false,
                    },
                ],
                DURING,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_skips_empty_steps_and_counts_bytes() {
        let steps = [0..0, 0..2, 2..2, 2..3];
        let mut cursor = Cursor::new();
        cursor.advance(0, &steps, 4);
        assert_eq!((cursor.step, cursor.offset, cursor.total), (1, 0, 0));
        cursor.advance(5, &steps, 4);
        assert_eq!((cursor.step, cursor.offset, cursor.total), (1, 5, 5));
        cursor.advance(3, &steps, 4);
        assert_eq!((cursor.step, cursor.offset, cursor.total), (3, 0, 8));
        cursor.advance(4, &steps, 4);
        assert_eq!((cursor.step, cursor.total), (4, 12));
    }
}
