//! The header check every collective opens with: ranks that called another
//! collective, element type, length, operation or root fail with `Mismatch`
//! naming the lowest rank whose header differs from theirs.
//!
//! Up to [`DIRECT_RANKS_MAX`] ranks every rank sends its header to every other (one
//! round); beyond, the ranks merge what they know by recursive doubling, so a
//! rank talks to ⌈log2 N⌉ + 1 peers instead of N - 1 (1,023 messages each
//! way per collective at 1,024 ranks, now 10 or 11). What they merge is
//! enough to name the same rank the direct check names: the lowest rank with
//! its header, and the lowest rank whose header differs from that one.

use super::DIRECT_RANKS_MAX;
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::wire::{mismatch, Header, Kind, HEADER_LEN};

impl Communicator {
    /// Fails with `Mismatch` naming the lowest rank whose header differs from
    /// `ours`, once every rank has called it.
    pub(crate) fn agree(&self, ours: &Header, kind: Kind) -> Result<()> {
        if self.size() <= DIRECT_RANKS_MAX {
            self.agree_directly(ours, kind)
        } else {
            self.agree_by_doubling(ours)
        }
    }

    fn agree_directly(&self, ours: &Header, kind: Kind) -> Result<()> {
        let theirs = self.exchange_small(|_| ours.encode().to_vec(), HEADER_LEN, kind)?;
        let odd = theirs.iter().enumerate().find_map(|(rank, bytes)| {
            let header = Header::decode(bytes.as_slice().try_into().expect("a header's length"));
            (rank != self.rank() && header != *ours).then_some((rank, header))
        });
        odd.map_or(Ok(()), |(rank, header)| Err(mismatch(rank, &header, ours)))
    }

    fn agree_by_doubling(&self, ours: &Header) -> Result<()> {
        const KIND: Kind = Kind::Agree;
        let step = Header::new(ours.seq, KIND, 0, None, 0, 0);
        let mut known = Known {
            first: (self.rank(), *ours),
            odd: None,
        };
        self.recursive_doubling(
            KIND,
            &step,
            &mut known,
            KNOWN_LEN,
            Known::encode,
            |known, theirs| {
                known.merge(Known::decode(theirs)?);
                Ok(())
            },
        )?;
        let (first, header) = known.first;
        if header != *ours {
            return Err(mismatch(first, &header, ours));
        }
        known
            .odd
            .map_or(Ok(()), |(rank, header)| Err(mismatch(rank, &header, ours)))
    }
}

/// What a set of ranks knows of their headers: its lowest rank's, and the
/// lowest of its ranks whose header differs from that one, if any.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Known {
    first: (usize, Header),
    odd: Option<(usize, Header)>,
}

/// Two (rank as u64, header) pairs; no odd rank is rank `u64::MAX`.
const KNOWN_LEN: usize = 2 * (8 + HEADER_LEN);

impl Known {
    /// The union of two sets' knowledge (commutative and idempotent).
    fn merge(&mut self, other: Known) {
        let (low, high) = if self.first.0 <= other.first.0 {
            (*self, other)
        } else {
            (other, *self)
        };
        // The high set's first rank differs from the low set's header, or
        // else its own odd rank is the one that does.
        let candidate = if high.first.1 != low.first.1 {
            Some(high.first)
        } else {
            high.odd
        };
        let odd = match (low.odd, candidate) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        *self = Known {
            first: low.first,
            odd,
        };
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(KNOWN_LEN);
        for (rank, header) in [Some(self.first), self.odd]
            .into_iter()
            .map(|pair| pair.unwrap_or((usize::MAX, self.first.1)))
        {
            bytes.extend_from_slice(&(rank as u64).to_le_bytes());
            bytes.extend_from_slice(&header.encode());
        }
        bytes
    }

    fn decode(bytes: &[u8]) -> Result<Known> {
        let pair = |at: usize| -> (u64, Header) {
            let rank = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
            let header = bytes[at + 8..at + 8 + HEADER_LEN]
                .try_into()
                .expect("a header's length");
            (rank, Header::decode(header))
        };
        let garbled = || Error::ControlMessage {
            detail: "a header check named no rank of the job".into(),
        };
        let (first, first_header) = pair(0);
        let (odd, odd_header) = pair(8 + HEADER_LEN);
        let first = usize::try_from(first).map_err(|_| garbled())?;
        let odd = match odd {
            u64::MAX => None,
            rank => Some((usize::try_from(rank).map_err(|_| garbled())?, odd_header)),
        };
        Ok(Known {
            first: (first, first_header),
            odd,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::on_mesh;
    use super::*;
    use crate::reduce::Element;

    fn header(seq: u64, count: usize) -> Header {
        Header::new(seq, Kind::Broadcast, f32::CODE, None, count, 0)
    }

    #[test]
    fn merging_is_commutative_and_idempotent_and_keeps_the_lowest_ranks() {
        let (a, b) = (header(0, 4), header(0, 5));
        let single = |rank, h| Known {
            first: (rank, h),
            odd: None,
        };
        let all = [
            single(0, a),
            single(1, a),
            single(2, b),
            single(3, a),
            single(4, b),
        ];
        // Any merge order ends with rank 0 first and rank 2 the lowest odd one.
        for order in [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 4, 0, 3, 1]] {
            let mut known = all[order[0]];
            for &i in &order[1..] {
                known.merge(all[i]);
                let copy = known;
                known.merge(copy);
                assert_eq!(known, copy, "idempotent");
            }
            assert_eq!(known.first, (0, a));
            assert_eq!(known.odd, Some((2, b)));
        }
        let mut known = all[1];
        known.merge(all[0]);
        assert_eq!(known.encode().len(), KNOWN_LEN);
        assert_eq!(Known::decode(&known.encode()).unwrap(), known);
    }

    /// Every rank's answer from the direct check and from the doubling one,
    /// for headers `of(rank)` on a `size`-rank mesh.
    fn both_checks(size: usize, of: fn(usize) -> Header) -> Vec<(Option<usize>, Option<usize>)> {
        let named = |result: Result<()>| match result {
            Ok(()) => None,
            Err(Error::Mismatch { rank, .. }) => Some(rank),
            Err(other) => panic!("{other}"),
        };
        on_mesh(size, move |rank, comm| {
            let direct = named(comm.agree_directly(&of(rank), Kind::Broadcast));
            let doubling = named(comm.agree_by_doubling(&of(rank)));
            Ok((direct, doubling))
        })
        .into_iter()
        .map(Result::unwrap)
        .collect()
    }

    #[test]
    fn doubling_names_the_rank_the_direct_check_names() {
        for size in 1..=11 {
            let agreeing = both_checks(size, |_| header(7, 4));
            assert!(
                agreeing.iter().all(|&answers| answers == (None, None)),
                "size {size}"
            );
            // One odd rank: the last, the first, one in the middle.
            for odd in [size - 1, 0, size / 2] {
                if size == 1 {
                    continue;
                }
                let of: fn(usize) -> Header = match odd {
                    0 => |rank| header(7, if rank == 0 { 5 } else { 4 }),
                    _ => |rank| header(7, 4 + rank % 3),
                };
                for (rank, (direct, doubling)) in both_checks(size, of).into_iter().enumerate() {
                    assert_eq!(direct, doubling, "size {size}, odd {odd}, rank {rank}");
                }
            }
        }
    }

    #[test]
    fn a_large_jobs_broadcast_names_the_rank_with_another_root() {
        let results = on_mesh(DIRECT_RANKS_MAX + 3, |rank, comm| {
            let mut values = [rank as f32; 3];
            let root = if rank == 6 { 1 } else { 0 };
            comm.broadcast(&mut values, root)
        });
        for (rank, result) in results.into_iter().enumerate() {
            let error = result.unwrap_err();
            let named = if rank == 6 { 0 } else { 6 };
            assert!(
                matches!(error, Error::Mismatch { rank, .. } if rank == named),
                "rank {rank}: {error}"
            );
            assert!(
                error.to_string().contains("broadcast of 3 f32 from rank"),
                "{error}"
            );
        }
    }
}
