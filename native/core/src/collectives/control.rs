//! The engine's control plane, built to scale with the job: a gather of
//! byte strings to rank 0 along a binomial tree, rank 0's bytes fanned out
//! along the same tree (the hosts' list at join), and a bitwise AND by
//! recursive doubling. A rank talks to at most ⌈log2 N⌉ + 1 peers, one
//! message each way per round, where an allgather or a direct exchange would
//! have every rank talk to all N - 1 (13 MB of requests reached every rank of
//! a 1,024-rank job's first step; now only rank 0 receives them all).
//!
//! Only the engine's thread calls them, every rank in the same order, so each
//! message carries the sender's header and the receiver checks it (sequence
//! and kind), instead of every rank first agreeing with every other: a
//! disagreement still fails with `Mismatch` naming the peer, and the
//! communicator closes, so the others fail fast with `PeerLost`.

use super::send_recv;
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::reduce::Element;
use crate::wire::{check_header, Header, Kind, HEADER_LEN};

impl Communicator {
    /// Collects every rank's `mine` on rank 0: `Some(blocks in rank order)`
    /// there, `None` on the other ranks.
    ///
    /// In round `k` a rank whose bit `k` is its lowest set bit sends what it
    /// holds (its block and its subtree's) to the rank `2^k` below and is
    /// done; the others receive from the rank `2^k` above, if there is one.
    pub(crate) fn gather_to_root(&mut self, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        const KIND: Kind = Kind::Gather;
        self.collective(|comm, seq| {
            let header = Header::new(seq, KIND, u8::CODE, None, 0, 0);
            let (n, r) = (comm.size(), comm.rank());
            let mut held = vec![(r, mine.to_vec())];
            let mut distance = 1;
            while distance < n {
                if r & distance != 0 {
                    send_blocks(comm.link(r - distance)?, &header, KIND, &held)?;
                    return Ok(None);
                }
                if r + distance < n {
                    held.extend(receive_blocks(comm.link(r + distance)?, &header, KIND, n)?);
                }
                distance *= 2;
            }
            held.sort_unstable_by_key(|(rank, _)| *rank);
            Ok(Some(held.into_iter().map(|(_, block)| block).collect()))
        })
    }

    /// Rank 0's `bytes` (`Some` there, `None` elsewhere) on every rank,
    /// along the binomial tree of [`Communicator::gather_to_root`] run
    /// backwards: a rank receives from the rank its lowest set bit away,
    /// then sends to the ranks `2^k` above it for each lower bit `k`.
    pub(crate) fn fan_out_from_root(&mut self, bytes: Option<Vec<u8>>) -> Result<Vec<u8>> {
        const KIND: Kind = Kind::Fanout;
        self.collective(|comm, seq| {
            let header = Header::new(seq, KIND, u8::CODE, None, 0, 0);
            let (n, r) = (comm.size(), comm.rank());
            let lowest_bit = match r {
                0 => n.next_power_of_two(),
                _ => r & r.wrapping_neg(),
            };
            let held = match bytes {
                Some(bytes) if r == 0 => vec![(0, bytes)],
                _ if r == 0 => {
                    return Err(Error::Unusable {
                        cause: "rank 0 fanned out nothing".into(),
                    })
                }
                _ => receive_blocks(comm.link(r - lowest_bit)?, &header, KIND, n)?,
            };
            let mut distance = lowest_bit / 2;
            while distance > 0 {
                if r + distance < n {
                    send_blocks(comm.link(r + distance)?, &header, KIND, &held)?;
                }
                distance /= 2;
            }
            match <[_; 1]>::try_from(held) {
                Ok([(0, bytes)]) => Ok(bytes),
                _ => Err(Error::ControlMessage {
                    detail: format!("rank {r} received a fan-out that is not rank 0's one block"),
                }),
            }
        })
    }

    /// Replaces `words` with the bitwise AND of every rank's `words` (the
    /// same length on every rank), by recursive doubling.
    pub(crate) fn bitwise_and(&mut self, words: &mut [u64]) -> Result<()> {
        const KIND: Kind = Kind::BitwiseAnd;
        self.collective(|comm, seq| {
            let header = Header::new(seq, KIND, 0, None, words.len(), 0);
            comm.recursive_doubling(
                KIND,
                &header,
                words,
                8 * words.len(),
                |words| words.iter().flat_map(|w| w.to_le_bytes()).collect(),
                |words, theirs| {
                    for (word, bytes) in words.iter_mut().zip(theirs.chunks_exact(8)) {
                        *word &= u64_at(bytes, 0);
                    }
                    Ok(())
                },
            )
        })
    }

    /// Merges every rank's `state` into every rank's, talking to ⌈log2 N⌉ + 1
    /// peers. Ranks from the largest power of two `p <= size` up first fold
    /// theirs into rank `r - p`; the first `p` ranks then exchange with the
    /// rank `2^k` apart in round `k`, each merging what it received; the
    /// folded ranks get the result back last. A message is `header` (checked
    /// on receipt) and `encode(state)`, `len` bytes on every rank; `merge`
    /// must be commutative and idempotent (partners must end alike, and a
    /// folded rank merges a result that holds its own part).
    pub(crate) fn recursive_doubling<S: ?Sized>(
        &self,
        kind: Kind,
        header: &Header,
        state: &mut S,
        len: usize,
        encode: impl Fn(&S) -> Vec<u8>,
        merge: impl Fn(&mut S, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let during = kind.name();
        let (n, r) = (self.size(), self.rank());
        let p = 1usize << n.ilog2();
        let message = |state: &S| {
            let mut bytes = header.encode().to_vec();
            bytes.extend(encode(state));
            debug_assert_eq!(bytes.len(), HEADER_LEN + len);
            bytes
        };
        let merge_from = |from: &Link, theirs: &[u8], state: &mut S| {
            let (head, body) = theirs.split_at(HEADER_LEN);
            check_header(
                from.rank(),
                head.try_into().expect("a header's length"),
                header,
            )?;
            merge(state, body)
        };
        let mut theirs = vec![0u8; HEADER_LEN + len];
        if r >= p {
            let partner = self.link(r - p)?;
            partner.send(&message(state), during)?;
            partner.recv(&mut theirs, during)?;
            return merge_from(partner, &theirs, state);
        }
        let folded = (r + p < n).then(|| self.link(r + p)).transpose()?;
        if let Some(extra) = folded {
            extra.recv(&mut theirs, during)?;
            merge_from(extra, &theirs, state)?;
        }
        let mut distance = 1;
        while distance < p {
            let peer = self.link(r ^ distance)?;
            send_recv(peer, &message(state), peer, &mut theirs, kind)?;
            merge_from(peer, &theirs, state)?;
            distance *= 2;
        }
        if let Some(extra) = folded {
            extra.send(&message(state), during)?;
        }
        Ok(())
    }
}

/// Sends `header`, then the blocks: their total length, then each block's
/// rank, length and bytes (integers u64, little-endian).
fn send_blocks(to: &Link, header: &Header, kind: Kind, blocks: &[(usize, Vec<u8>)]) -> Result<()> {
    let mut body = Vec::with_capacity(blocks.iter().map(|(_, b)| 16 + b.len()).sum());
    for (rank, block) in blocks {
        body.extend_from_slice(&(*rank as u64).to_le_bytes());
        body.extend_from_slice(&(block.len() as u64).to_le_bytes());
        body.extend_from_slice(block);
    }
    let mut head = header.encode().to_vec();
    head.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let during = kind.name();
    to.send(&head, during)?;
    to.send(&body, during)
}

/// Receives what [`send_blocks`] sent, checking the header and that every
/// block names a rank of the job.
fn receive_blocks(
    from: &Link,
    header: &Header,
    kind: Kind,
    size: usize,
) -> Result<Vec<(usize, Vec<u8>)>> {
    let during = kind.name();
    from.receive_header(header, during)?;
    let mut len = [0u8; 8];
    from.recv(&mut len, during)?;
    let garbled = |what: &str| Error::ControlMessage {
        detail: format!("rank {} sent a {during} with {what}", from.rank()),
    };
    let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| garbled("a huge length"))?;
    let mut body = vec![0u8; len];
    from.recv(&mut body, during)?;
    let mut blocks = Vec::new();
    let mut rest = &body[..];
    while !rest.is_empty() {
        if rest.len() < 16 {
            return Err(garbled("a truncated block"));
        }
        let (rank, block_len) = (u64_at(rest, 0), u64_at(rest, 8));
        let rank = usize::try_from(rank)
            .ok()
            .filter(|&rank| rank < size)
            .ok_or_else(|| garbled(&format!("a block of rank {rank}")))?;
        let block_len = usize::try_from(block_len)
            .ok()
            .filter(|&l| l <= rest.len() - 16)
            .ok_or_else(|| garbled("a block longer than the message"))?;
        blocks.push((rank, rest[16..16 + block_len].to_vec()));
        rest = &rest[16 + block_len..];
    }
    Ok(blocks)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut fixed = [0u8; 8];
    fixed.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(fixed)
}

#[cfg(test)]
mod tests {
    use super::super::on_mesh;
    use super::*;

    /// Rank r's block: r bytes of value r (rank 0's is empty), plus a large
    /// one on the last rank, whose bytes cross the most hops.
    fn block(rank: usize, size: usize) -> Vec<u8> {
        let len = if rank + 1 == size { 300_000 } else { rank };
        (0..len).map(|i| (rank + i) as u8).collect()
    }

    #[test]
    fn every_ranks_block_reaches_rank_0_in_rank_order() {
        for size in 1..=9 {
            let results = on_mesh(size, move |rank, comm| {
                let first = comm.gather_to_root(&block(rank, size))?;
                // A second round on the same links keeps its own order.
                let second = comm.gather_to_root(&[rank as u8; 3])?;
                Ok((first, second))
            });
            for (rank, result) in results.into_iter().enumerate() {
                let (first, second) = result.unwrap();
                if rank == 0 {
                    let expected: Vec<Vec<u8>> = (0..size).map(|r| block(r, size)).collect();
                    assert_eq!(first.unwrap(), expected, "size {size}");
                    let expected: Vec<Vec<u8>> = (0..size).map(|r| vec![r as u8; 3]).collect();
                    assert_eq!(second.unwrap(), expected, "size {size}");
                } else {
                    assert!(
                        first.is_none() && second.is_none(),
                        "size {size} rank {rank}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_rank_ends_with_the_and_of_all_words() {
        for size in 1..=9 {
            // Word 0: every bit but rank r's; word 1: all ones; word 2: bit r only.
            let words = |rank: usize| vec![!(1u64 << rank), u64::MAX, 1u64 << rank];
            let results = on_mesh(size, move |rank, comm| {
                let mut mine = words(rank);
                comm.bitwise_and(&mut mine)?;
                let mut again = vec![u64::MAX];
                comm.bitwise_and(&mut again)?;
                Ok((mine, again))
            });
            let all_ranks = (1u64 << size) - 1;
            let expected = vec![!all_ranks, u64::MAX, if size == 1 { 1 } else { 0 }];
            for (rank, result) in results.into_iter().enumerate() {
                let (mine, again) = result.unwrap();
                assert_eq!(mine, expected, "size {size} rank {rank}");
                assert_eq!(again, [u64::MAX]);
            }
        }
    }

    #[test]
    fn ranks_out_of_step_fail_naming_a_peer() {
        let results = on_mesh(4, |rank, comm| {
            if rank == 3 {
                comm.bitwise_and(&mut [1]).map(|_| ())
            } else {
                comm.gather_to_root(&[1]).map(|_| ())
            }
        });
        // Rank 2 reads rank 3's AND where its gather expects rank 3's blocks;
        // ranks 0 and 3 then lose rank 2; rank 1 had sent its block already.
        let [r0, r1, r2, r3]: [Result<()>; 4] = results.try_into().unwrap();
        let mismatch = r2.unwrap_err();
        assert!(
            matches!(mismatch, Error::Mismatch { rank: 3, .. }),
            "{mismatch}"
        );
        assert!(
            mismatch
                .to_string()
                .contains("it called bitwise and of 1 64-bit words"),
            "{mismatch}"
        );
        for lost in [r0.unwrap_err(), r3.unwrap_err()] {
            assert!(lost.is_peer_lost(), "{lost}");
        }
        r1.unwrap();
    }
}
