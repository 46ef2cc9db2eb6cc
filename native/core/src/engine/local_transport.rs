//! A transport between threads of one process, for tests and
//! single-process use: every operation is one exchange of byte vectors
//! through shared memory, and each rank computes the result from every
//! rank's bytes.
//!
//! Invariant: an exchange completes only when every rank has deposited its
//! bytes for the same round, so ranks that call operations in different
//! orders or counts time out instead of mixing rounds.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::collectives::AllreduceOptions;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::with_dtype;

use super::transport::Transport;

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
/// exchange of byte vectors through shared memory. Supports allreduce,
/// broadcast, allgather and barrier of every element type; alltoall and
/// reducescatter are `Unsupported`.
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

/// This rank's contribution to an allreduce: `data` multiplied by the
/// prescale factor.
fn prescaled<T: Element>(data: &[u8], factor: f64) -> Vec<u8> {
    let mut typed = vec![T::ZERO; data.len() / std::mem::size_of::<T>()];
    as_bytes_mut(&mut typed).copy_from_slice(data);
    T::scale(&mut typed, factor);
    as_bytes(&typed).to_vec()
}

/// Reduces every rank's contribution into `out` and applies the postscale
/// factor. Compression is not emulated: nothing travels.
fn reduce_all<T: Element>(all: &[Vec<u8>], options: AllreduceOptions, out: &mut [u8]) {
    let n = out.len() / std::mem::size_of::<T>();
    let mut acc = vec![T::ZERO; n];
    let mut next = vec![T::ZERO; n];
    for (i, bytes) in all.iter().enumerate() {
        let target = if i == 0 { &mut acc } else { &mut next };
        as_bytes_mut(target).copy_from_slice(bytes);
        if i > 0 {
            T::reduce(&mut acc, &next, options.op);
        }
    }
    if options.op == ReduceOp::Average {
        T::divide(&mut acc, all.len());
    }
    T::scale(&mut acc, options.postscale);
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

    fn allreduce(
        &mut self,
        dtype: DataType,
        options: AllreduceOptions,
        data: &mut [u8],
    ) -> Result<()> {
        let mine = with_dtype!(dtype, T => prescaled::<T>(data, options.prescale));
        let all = self.exchange(mine)?;
        with_dtype!(dtype, T => reduce_all::<T>(&all, options, data));
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
    use std::thread;

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
                    t.allreduce(DataType::F32, ReduceOp::Sum.into(), &mut data)
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
