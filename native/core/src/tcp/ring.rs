//! Pipelined ring allreduce: reduce-scatter then allgather, sliced so that
//! every piece flows around the ring while it is still in the cache.
//!
//! The data is cut into *slices* of `size` x [`UNIT_BYTES`]; each slice is
//! split into `size` segments ([`crate::partition::segment`]) and
//! allreduced by the classic ring: in reduce-scatter step `s` rank `r` sends
//! segment `r - s` to rank `r + 1` and reduces segment `r - s - 1`, arriving
//! from rank `r - 1`, into its own data; after `size - 1` steps it owns
//! segment `r + 1` fully reduced. In allgather step `t` it forwards segment
//! `r + 1 - t` and stores segment `r - t`. One step of one slice is a *unit*.
//!
//! The units travel in rounds: in round `t` every slice `k` with
//! `0 <= t - k < 2 (size - 1)` does step `t - k`, in order of `k`. A unit of
//! step `s > 0` sends what the unit of step `s - 1` of the same slice
//! received in the round before, so a rank may send each byte as soon as it
//! has received (and reduced) it: sending, receiving and reducing overlap,
//! no step waits for a whole segment, and a reduced piece goes out while it
//! is still hot. Both ends of a link derive the same order from the length
//! alone. Reduce-scatter bytes land in a small scratch buffer and are
//! reduced as whole elements arrive; allgather bytes land in place.
//!
//! Invariant: every element is reduced by one fixed chain of ranks in one
//! fixed order, then copied byte for byte, so all ranks end bit-identical
//! however the stream happens to be cut into reads and writes.

use std::ops::Range;

use crate::error::Result;
use crate::link::Link;
use crate::partition::segment;
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::tcp::pump::{wait, HeaderSwap, Want};
use crate::wire::Header;

/// Bytes of a segment of one slice: the largest unit, small enough that the
/// units in flight stay in the cache, large enough to keep system calls
/// few. Reduce-scatter units are received into a scratch buffer this big.
/// Measured over loopback with ranks bound to cores, against 256 KiB: 2
/// ranks 5.1 against 4.0 GB/s at 1 MiB and 4.2 against 3.5 at 16 MiB, equal
/// at 64 MiB; 3 and 4 ranks equal or a little ahead; 1 MiB units lose.
const UNIT_BYTES: usize = 512 << 10;

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

/// The units of a slice schedule, as sent (or received) in order.
struct Units {
    /// Elements of each unit.
    ranges: Vec<Range<usize>>,
    /// Step of each unit within its slice.
    steps: Vec<usize>,
    /// For each unit, the index of the unit of the same slice one step
    /// earlier (`None` at step 0).
    earlier: Vec<Option<usize>>,
}

/// The schedule of rank `rank` among `size` ranks over `len` elements whose
/// slices are `slice` elements long: units in round order, with the
/// segment of step `s` of a slice given by `seg_of(s)` (a segment index).
fn schedule(len: usize, size: usize, slice: usize, seg_of: impl Fn(usize) -> usize) -> Units {
    let steps = 2 * (size - 1);
    let slices = len.div_ceil(slice).max(1);
    let mut units = Units {
        ranges: Vec::new(),
        steps: Vec::new(),
        earlier: Vec::new(),
    };
    let mut index = vec![usize::MAX; slices * steps];
    for round in 0..slices + steps - 1 {
        for k in round.saturating_sub(steps - 1)..slices.min(round + 1) {
            let step = round - k;
            let start = k * slice;
            let part = segment(len.min(start + slice) - start, size, seg_of(step) % size);
            index[k * steps + step] = units.ranges.len();
            units.ranges.push(start + part.start..start + part.end);
            units.steps.push(step);
            units
                .earlier
                .push(step.checked_sub(1).map(|s| index[k * steps + s]));
        }
    }
    units
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
    let unit = (UNIT_BYTES / elem).max(1);
    let slice = n * unit;
    // Segment sent in step s: r - s in reduce-scatter, r + 1 - t in
    // allgather step t = s - (n - 1); received: the one sent a step later.
    let sent_seg = |s: usize| {
        if s < n - 1 {
            r + n - s
        } else {
            r + 1 + 2 * n - 1 - s
        }
    };
    let sends = schedule(len, n, slice, sent_seg);
    let recvs = schedule(len, n, slice, |s| sent_seg(s + 1));
    let (mut out, mut inc) = (Cursor::new(), Cursor::new());
    out.advance(0, &sends.ranges, elem);
    inc.advance(0, &recvs.ranges, elem);
    let mut swap = HeaderSwap::new(header);
    let mut scratch = vec![T::ZERO; len.div_ceil(n).clamp(1, unit)];
    let mut fill = 0;
    loop {
        let mut moved = false;
        // Send what has been received (and reduced) of the unit this one
        // forwards; step 0 sends this rank's own data.
        let ready = match sends.earlier.get(out.step) {
            None => 0,
            Some(None) => usize::MAX,
            Some(&Some(j)) if j < inc.step => usize::MAX,
            Some(&Some(j)) if j == inc.step => inc.offset,
            Some(_) => 0,
        };
        if !swap.pushed() {
            moved |= swap.push(ring.next, DURING)?;
        } else if out.offset < ready {
            let bytes = as_bytes(&data[sends.ranges[out.step].clone()]);
            let end = bytes.len().min(ready);
            let sent = ring.next.try_send(&bytes[out.offset..end], DURING)?;
            out.advance(sent, &sends.ranges, elem);
            moved |= sent > 0;
        } else if !ring.next.flushed() {
            moved |= ring.next.try_flush(DURING)?;
        }
        // Receive: the header, then units, reducing those of reduce-scatter.
        if !swap.pulled() {
            moved |= swap.pull(ring.prev, DURING)?;
        } else if inc.step < recvs.ranges.len() && recvs.steps[inc.step] < n - 1 {
            let range = recvs.ranges[inc.step].clone();
            let want = range.len() * elem - inc.offset;
            let got = ring
                .prev
                .try_recv(&mut as_bytes_mut(&mut scratch)[fill..want], DURING)?;
            fill += got;
            let whole = fill / elem;
            if whole > 0 {
                let at = range.start + inc.offset / elem;
                let into = &mut data[at..at + whole];
                T::reduce(into, &scratch[..whole], op);
                if op == ReduceOp::Average && recvs.steps[inc.step] == n - 2 {
                    T::divide(into, n);
                }
                as_bytes_mut(&mut scratch).copy_within(whole * elem..fill, 0);
                fill -= whole * elem;
                inc.advance(whole * elem, &recvs.ranges, elem);
            }
            moved |= got > 0;
        } else if inc.step < recvs.ranges.len() {
            let range = recvs.ranges[inc.step].clone();
            let got = ring
                .prev
                .try_recv(&mut as_bytes_mut(&mut data[range])[inc.offset..], DURING)?;
            inc.advance(got, &recvs.ranges, elem);
            moved |= got > 0;
        }
        let sending = !swap.pushed() || out.step < sends.ranges.len() || !ring.next.flushed();
        let receiving = !swap.pulled() || inc.step < recvs.ranges.len();
        if !sending && !receiving {
            return Ok(());
        }
        if !moved {
            wait(
                &[
                    Want {
                        link: ring.next,
                        read: false,
                        // Waiting for data to forward is waiting to read.
                        write: !swap.pushed() || out.offset < ready || !ring.next.flushed(),
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
