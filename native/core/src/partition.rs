//! How data splits into per-rank segments: the ring, the owners algorithm,
//! shared memory's shards and reducescatter agree on this one split.

use std::ops::Range;

/// Range of segment `index` when `len` elements are split into `parts`
/// contiguous segments: the first `len % parts` segments have one element
/// more than the rest; segments may be empty.
pub(crate) fn segment(len: usize, parts: usize, index: usize) -> Range<usize> {
    debug_assert!(parts > 0 && index < parts);
    let base = len / parts;
    let extra = len % parts;
    let start = index * base + index.min(extra);
    let seg_len = base + usize::from(index < extra);
    start..start + seg_len
}

/// Borrows two disjoint segments of `data`, one to read and one to write.
pub(crate) fn split_pair<T>(
    data: &mut [T],
    read: Range<usize>,
    write: Range<usize>,
) -> (&[T], &mut [T]) {
    if read.end <= write.start {
        let (head, tail) = data.split_at_mut(write.start);
        (&head[read], &mut tail[..write.end - write.start])
    } else {
        debug_assert!(write.end <= read.start, "segments overlap");
        let (head, tail) = data.split_at_mut(read.start);
        (&tail[..read.end - read.start], &mut head[write])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_data_in_order() {
        for len in [0, 1, 2, 3, 4, 5, 7, 8, 100, 1001] {
            for parts in 1..=5 {
                let mut next = 0;
                let mut sizes = Vec::new();
                for index in 0..parts {
                    let range = segment(len, parts, index);
                    assert_eq!(range.start, next, "len {len} parts {parts}");
                    next = range.end;
                    sizes.push(range.len());
                }
                assert_eq!(next, len);
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "unbalanced {sizes:?}");
                assert_eq!(sizes[0], *max, "first segment is the largest");
            }
        }
    }

    #[test]
    fn segments_of_short_data_are_empty_at_the_end() {
        assert_eq!(segment(2, 4, 0), 0..1);
        assert_eq!(segment(2, 4, 1), 1..2);
        assert_eq!(segment(2, 4, 2), 2..2);
        assert_eq!(segment(2, 4, 3), 2..2);
        assert_eq!(segment(0, 3, 1), 0..0);
    }

    #[test]
    fn split_pair_handles_both_orders_and_empty_segments() {
        let mut data = [0, 1, 2, 3, 4];
        let (read, write) = split_pair(&mut data, 0..2, 3..5);
        assert_eq!(read, [0, 1]);
        write[0] = 9;
        let (read, write) = split_pair(&mut data, 3..5, 0..2);
        assert_eq!(read, [9, 4]);
        assert_eq!(write.len(), 2);
        let (read, write) = split_pair(&mut data, 5..5, 5..5);
        assert!(read.is_empty() && write.is_empty());
        let (read, write) = split_pair(&mut data, 2..2, 2..4);
        assert!(read.is_empty());
        assert_eq!(write, [2, 9]);
    }
}
