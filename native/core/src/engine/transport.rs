//! What the engine needs from a transport, and two transports.
//!
//! The engine's thread drives a [`Transport`]: a bitwise AND and a
//! gather/broadcast of bytes for the control plane, and the collectives that
//! execute responses on tensor bytes. Negotiation knows nothing of sockets;
//! a transport knows nothing of negotiation.
//!
//! * [`Communicator`] implements it on the operations it has today: the
//!   control plane, broadcast and allgather are built on `allreduce` of
//!   `i64` words (each rank writes its own zero-padded slot, and a wrapping
//!   sum with zeros is exact, so the result is every rank's bytes); the AND
//!   packs each bit into a field wide enough to count the ranks, sums, and
//!   keeps the fields that counted every rank. Allreduce runs on every
//!   element type; alltoall and reducescatter are `Unsupported` for now.
//! * [`LocalTransport`] connects threads of one process, for tests and
//!   single-process use.
//!
//! Invariant for implementors: a collective either returns `Unsupported`
//! before communicating, identically on every rank (the engine then fails
//! just that tensor and carries on), or communicates; any other error is
//! fatal to the engine.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};

use crate::dtype::DataType;

/// The operations the engine's thread runs on; every rank calls them in the
/// same order with agreeing arguments.
pub trait Transport: Send {
    /// This rank, in `0..size`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// Replaces `words` with the bitwise AND of every rank's `words` (all
    /// ranks pass the same length).
    fn bitwise_and(&mut self, words: &mut [u64]) -> Result<()>;

    /// Collects every rank's `mine` on rank 0: `Some(list in rank order)` on
    /// rank 0, `None` elsewhere.
    fn control_gather(&mut self, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>>;

    /// Rank 0's `bytes`, on every rank (other ranks' `bytes` are ignored).
    fn control_broadcast(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>>;

    /// Reduces `data` (elements of `dtype`) element-wise across ranks, in
    /// place. `data` may be unaligned.
    fn allreduce(&mut self, dtype: DataType, op: ReduceOp, data: &mut [u8]) -> Result<()>;

    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;

    /// Replaces `data` with rank `root`'s (same length on every rank).
    fn broadcast(&mut self, dtype: DataType, root: usize, data: &mut [u8]) -> Result<()> {
        let _ = (root, data);
        Err(unsupported("broadcast", dtype))
    }

    /// Every rank's `mine` concatenated in rank order; rank `r` contributes
    /// `bytes_per_rank[r]` bytes.
    fn allgather(
        &mut self,
        dtype: DataType,
        mine: &[u8],
        bytes_per_rank: &[usize],
    ) -> Result<Vec<u8>> {
        let _ = (mine, bytes_per_rank);
        Err(unsupported("allgather", dtype))
    }

    /// Sends `send_bytes[j]` consecutive bytes of `data` to rank `j` and
    /// returns what every rank sent this one, in rank order.
    fn alltoall(&mut self, dtype: DataType, data: &[u8], send_bytes: &[usize]) -> Result<Vec<u8>> {
        let _ = (data, send_bytes);
        Err(unsupported("alltoall", dtype))
    }

    /// Reduces `data` across ranks and returns this rank's block of
    /// `row_bytes`-sized rows (the first `rows % size` ranks get one more).
    fn reducescatter(
        &mut self,
        dtype: DataType,
        op: ReduceOp,
        data: &[u8],
        row_bytes: usize,
    ) -> Result<Vec<u8>> {
        let _ = (op, data, row_bytes);
        Err(unsupported("reducescatter", dtype))
    }
}

pub(crate) fn unsupported(what: &str, dtype: DataType) -> Error {
    Error::Unsupported {
        what: format!("{what} of {dtype}"),
    }
}

// --------------------------------------------------------------- bit packing

/// Bits per field: enough to count `size` ranks without carrying into the
/// next field.
fn field_width(size: usize) -> usize {
    (usize::BITS - size.leading_zeros()) as usize
}

/// Spreads the bits of `words` into fields of `field_width(size)` bits,
/// `64 / width` fields per word, each holding 0 or 1.
pub(crate) fn pack_bits(words: &[u64], size: usize) -> Vec<i64> {
    let width = field_width(size);
    let per_word = 64 / width;
    let bits = words.len() * 64;
    let mut packed = vec![0u64; bits.div_ceil(per_word)];
    for i in (0..bits).filter(|i| words[i / 64] >> (i % 64) & 1 == 1) {
        packed[i / per_word] |= 1 << ((i % per_word) * width);
    }
    packed.into_iter().map(|w| w as i64).collect()
}

/// Inverse of [`pack_bits`] after a sum over `size` ranks: a bit is set
/// where its field counted every rank.
pub(crate) fn unpack_and(packed: &[i64], size: usize, words: &mut [u64]) {
    let width = field_width(size);
    let per_word = 64 / width;
    let mask = (1u64 << width) - 1;
    for (i, word) in words.iter_mut().enumerate() {
        *word = 0;
        for b in 0..64 {
            let index = i * 64 + b;
            let field = (packed[index / per_word] as u64) >> ((index % per_word) * width) & mask;
            if field == size as u64 {
                *word |= 1 << b;
            }
        }
    }
}

// -------------------------------------------------------------- communicator

fn byte_len(value: i64) -> Result<usize> {
    usize::try_from(value).map_err(|_| Error::ControlMessage {
        detail: format!("negative length {value} in a byte exchange"),
    })
}

/// Every rank's bytes on every rank, from two allreduces: one of the
/// lengths, one of the zero-padded slots.
fn allgather_bytes(comm: &mut Communicator, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let (rank, size) = (comm.rank(), comm.size());
    let mut lens = vec![0i64; size];
    lens[rank] = mine.len() as i64;
    comm.allreduce(&mut lens, ReduceOp::Sum)?;
    let lens = lens.into_iter().map(byte_len).collect::<Result<Vec<_>>>()?;
    let offsets: Vec<usize> = lens
        .iter()
        .scan(0, |at, len| {
            let start = *at;
            *at += len.div_ceil(8);
            Some(start)
        })
        .collect();
    let total: usize = lens.iter().map(|l| l.div_ceil(8)).sum();
    let mut words = vec![0i64; total];
    let start = offsets[rank] * 8;
    as_bytes_mut(&mut words)[start..start + mine.len()].copy_from_slice(mine);
    comm.allreduce(&mut words, ReduceOp::Sum)?;
    let bytes = as_bytes(&words);
    Ok(offsets
        .iter()
        .zip(&lens)
        .map(|(&o, &l)| bytes[o * 8..o * 8 + l].to_vec())
        .collect())
}

impl Transport for Communicator {
    fn rank(&self) -> usize {
        Communicator::rank(self)
    }

    fn size(&self) -> usize {
        Communicator::size(self)
    }

    fn bitwise_and(&mut self, words: &mut [u64]) -> Result<()> {
        let size = Communicator::size(self);
        if size == 1 {
            return Ok(());
        }
        let mut packed = pack_bits(words, size);
        self.allreduce(&mut packed, ReduceOp::Sum)?;
        unpack_and(&packed, size, words);
        Ok(())
    }

    fn control_gather(&mut self, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        let all = allgather_bytes(self, mine)?;
        Ok((Communicator::rank(self) == 0).then_some(all))
    }

    fn control_broadcast(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mine = if Communicator::rank(self) == 0 {
            bytes
        } else {
            Vec::new()
        };
        let mut all = allgather_bytes(self, &mine)?;
        Ok(all.swap_remove(0))
    }

    fn allreduce(&mut self, dtype: DataType, op: ReduceOp, data: &mut [u8]) -> Result<()> {
        self.allreduce_bytes(dtype, data, op)
    }

    fn barrier(&mut self) -> Result<()> {
        Communicator::barrier(self)
    }

    fn broadcast(&mut self, _dtype: DataType, root: usize, data: &mut [u8]) -> Result<()> {
        let mine = if Communicator::rank(self) == root {
            data.to_vec()
        } else {
            Vec::new()
        };
        let all = allgather_bytes(self, &mine)?;
        let theirs = &all[root];
        if theirs.len() != data.len() {
            return Err(Error::Mismatch {
                rank: root,
                detail: format!(
                    "it broadcast {} bytes, this rank expected {}",
                    theirs.len(),
                    data.len()
                ),
            });
        }
        data.copy_from_slice(theirs);
        Ok(())
    }

    fn allgather(
        &mut self,
        _dtype: DataType,
        mine: &[u8],
        bytes_per_rank: &[usize],
    ) -> Result<Vec<u8>> {
        let all = allgather_bytes(self, mine)?;
        for (rank, (got, want)) in all.iter().zip(bytes_per_rank).enumerate() {
            if got.len() != *want {
                return Err(Error::Mismatch {
                    rank,
                    detail: format!("it gathered {} bytes, expected {want}", got.len()),
                });
            }
        }
        Ok(all.concat())
    }
}

// ------------------------------------------------------------ local transport

#[derive(Debug, Default)]
struct Round {
    /// Completed rounds; a round's result is published under its number.
    generation: u64,
    contributions: Vec<Option<Vec<u8>>>,
    arrived: usize,
    published: Option<(u64, Arc<Vec<Vec<u8>>>)>,
    /// A rank whose transport was dropped.
    closed: Option<usize>,
}

#[derive(Debug)]
struct Exchange {
    size: usize,
    timeout: Duration,
    round: Mutex<Round>,
    changed: Condvar,
}

impl Exchange {
    fn lock(&self) -> MutexGuard<'_, Round> {
        self.round.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Deposits `mine` and returns every rank's deposit of this round.
    fn exchange(&self, rank: usize, mine: Vec<u8>) -> Result<Arc<Vec<Vec<u8>>>> {
        let mut round = self.lock();
        if let Some(closed) = round.closed {
            return Err(lost(closed));
        }
        let generation = round.generation;
        round.contributions[rank] = Some(mine);
        round.arrived += 1;
        if round.arrived == self.size {
            let all: Vec<Vec<u8>> = round
                .contributions
                .iter_mut()
                .map(|c| c.take().unwrap_or_default())
                .collect();
            let all = Arc::new(all);
            round.published = Some((generation, all.clone()));
            round.generation += 1;
            round.arrived = 0;
            self.changed.notify_all();
            return Ok(all);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some((g, all)) = &round.published {
                if *g == generation {
                    return Ok(all.clone());
                }
            }
            if let Some(closed) = round.closed {
                return Err(lost(closed));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    what: format!(
                        "after {:?} waiting for the other threads in a local exchange",
                        self.timeout
                    ),
                    rank: None,
                });
            }
            round = self
                .changed
                .wait_timeout(round, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

fn lost(rank: usize) -> Error {
    Error::PeerLost {
        rank,
        context: "in a local exchange: its transport was dropped".into(),
    }
}

/// A transport between threads of one process: every operation is one
/// exchange of byte vectors through shared memory. Supports allreduce of
/// f32, f64, i32 and i64, and broadcast, allgather and barrier of any type.
#[derive(Debug)]
pub struct LocalTransport {
    rank: usize,
    exchange: Arc<Exchange>,
}

impl LocalTransport {
    /// `size` connected transports, rank `r` at index `r`; an operation
    /// waits at most `timeout` for the others.
    pub fn group(size: usize, timeout: Duration) -> Vec<LocalTransport> {
        let exchange = Arc::new(Exchange {
            size,
            timeout,
            round: Mutex::new(Round {
                contributions: vec![None; size],
                ..Round::default()
            }),
            changed: Condvar::new(),
        });
        (0..size)
            .map(|rank| LocalTransport {
                rank,
                exchange: exchange.clone(),
            })
            .collect()
    }

    fn exchange(&self, mine: Vec<u8>) -> Result<Arc<Vec<Vec<u8>>>> {
        self.exchange.exchange(self.rank, mine)
    }
}

impl Drop for LocalTransport {
    fn drop(&mut self) {
        let mut round = self.exchange.lock();
        round.closed.get_or_insert(self.rank);
        self.exchange.changed.notify_all();
    }
}

fn reduce_all<T: Element>(all: &[Vec<u8>], op: ReduceOp, out: &mut [u8]) {
    let n = out.len() / std::mem::size_of::<T>();
    let mut acc = vec![T::ZERO; n];
    let mut next = vec![T::ZERO; n];
    for (i, bytes) in all.iter().enumerate() {
        let target = if i == 0 { &mut acc } else { &mut next };
        as_bytes_mut(target).copy_from_slice(bytes);
        if i > 0 {
            T::reduce(&mut acc, &next, op);
        }
    }
    if op == ReduceOp::Average {
        T::divide(&mut acc, all.len());
    }
    out.copy_from_slice(as_bytes(&acc));
}

impl Transport for LocalTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.exchange.size
    }

    fn bitwise_and(&mut self, words: &mut [u64]) -> Result<()> {
        let all = self.exchange(words.iter().flat_map(|w| w.to_le_bytes()).collect())?;
        for (i, word) in words.iter_mut().enumerate() {
            *word = all.iter().fold(u64::MAX, |acc, bytes| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
                acc & u64::from_le_bytes(w)
            });
        }
        Ok(())
    }

    fn control_gather(&mut self, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        let all = self.exchange(mine.to_vec())?;
        Ok((self.rank == 0).then(|| all.to_vec()))
    }

    fn control_broadcast(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mine = if self.rank == 0 { bytes } else { Vec::new() };
        Ok(self.exchange(mine)?[0].clone())
    }

    fn allreduce(&mut self, dtype: DataType, op: ReduceOp, data: &mut [u8]) -> Result<()> {
        let reduce = match dtype {
            DataType::F32 => reduce_all::<f32>,
            DataType::F64 => reduce_all::<f64>,
            DataType::I32 => reduce_all::<i32>,
            DataType::I64 => reduce_all::<i64>,
            other => return Err(unsupported("allreduce", other)),
        };
        let all = self.exchange(data.to_vec())?;
        reduce(&all, op, data);
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        self.exchange(Vec::new()).map(|_| ())
    }

    fn broadcast(&mut self, _dtype: DataType, root: usize, data: &mut [u8]) -> Result<()> {
        let all = self.exchange(data.to_vec())?;
        data.copy_from_slice(&all[root]);
        Ok(())
    }

    fn allgather(&mut self, _: DataType, mine: &[u8], _: &[usize]) -> Result<Vec<u8>> {
        Ok(self.exchange(mine.to_vec())?.concat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::thread;

    #[test]
    fn packed_sums_give_the_and() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for size in 1..=9 {
            let ranks: Vec<Vec<u64>> = (0..size)
                .map(|_| {
                    (0..3)
                        .map(|_| rng.gen::<u64>() | rng.gen::<u64>())
                        .collect()
                })
                .collect();
            let mut sum = vec![0i64; pack_bits(&ranks[0], size).len()];
            for words in &ranks {
                for (s, p) in sum.iter_mut().zip(pack_bits(words, size)) {
                    *s = s.wrapping_add(p);
                }
            }
            let mut got = vec![0u64; 3];
            unpack_and(&sum, size, &mut got);
            let want: Vec<u64> = (0..3)
                .map(|i| ranks.iter().fold(u64::MAX, |a, w| a & w[i]))
                .collect();
            assert_eq!(got, want, "size {size}");
        }
    }

    #[test]
    fn local_transport_runs_every_operation() {
        let results: Vec<_> = LocalTransport::group(3, Duration::from_secs(10))
            .into_iter()
            .map(|mut t| {
                thread::spawn(move || {
                    let rank = t.rank();
                    let mut words = [u64::MAX, 1 << rank];
                    t.bitwise_and(&mut words).unwrap();
                    let gathered = t.control_gather(&[rank as u8; 2]).unwrap();
                    let told = t.control_broadcast(vec![9, rank as u8]).unwrap();
                    let mut data = as_bytes(&[rank as f32 + 1.0, 2.0]).to_vec();
                    t.allreduce(DataType::F32, ReduceOp::Sum, &mut data)
                        .unwrap();
                    t.barrier().unwrap();
                    (words, gathered, told, data)
                })
            })
            .collect();
        for (rank, result) in results.into_iter().enumerate() {
            let (words, gathered, told, data) = result.join().unwrap();
            assert_eq!(words, [u64::MAX, 0]);
            assert_eq!(gathered.is_some(), rank == 0);
            assert_eq!(told, vec![9, 0]);
            assert_eq!(data, as_bytes(&[6.0f32, 6.0]));
        }
    }

    #[test]
    fn a_dropped_local_peer_is_lost() {
        let mut group = LocalTransport::group(2, Duration::from_secs(10));
        let other = group.pop();
        drop(other);
        let err = group[0].barrier().unwrap_err();
        assert!(err.is_peer_lost(), "{err}");
    }
}
