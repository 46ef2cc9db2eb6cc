//! Horovod's collectives beyond ring allreduce and barrier: allgather,
//! broadcast, alltoall, reducescatter, grouped allreduce, and allreduce with
//! scale factors, compression or untyped bytes. One module per collective,
//! each an `impl Communicator` block.
//!
//! Every collective here opens with [`Communicator::agree`] (`agreement`):
//! every rank learns every other rank's header, or enough of them, before
//! comparing, so ranks that call different collectives, element types,
//! lengths, operations or roots all fail with `Mismatch` naming a rank that
//! disagrees — every rank, not only the neighbours of the odd one out, and
//! never after a wait for a timeout. Counts that may differ per rank (an
//! allgather's contribution, an alltoall's splits) are exchanged right after.
//!
//! Invariant: a rank only starts the data phase once it has read every
//! peer's header, so no peer can be left blocked writing data this rank will
//! never read; and in every data step a send larger than
//! [`INLINE_SEND_MAX`] runs on its own thread, concurrently with the
//! receive, so no cycle of blocked writers can form.

mod agreement;
mod allgather;
mod alltoall;
mod broadcast;
mod control;
mod options;
mod reducescatter;

pub use options::{AllreduceOptions, Compression};

use std::ops::Range;
use std::thread;

use crate::communicator::Communicator;
use crate::error::{Error, FirstError, Result};
use crate::link::Link;
use crate::mesh::DIRECT_RANKS_MAX;
use crate::wire::{Header, Kind};

/// Messages up to this many bytes are written before receiving, on the
/// calling thread: far below any TCP buffer, so such a write never blocks.
const INLINE_SEND_MAX: usize = 4096;

/// An allgather count no rank has reported yet (no block has that length).
const UNKNOWN_COUNT: u64 = u64::MAX;

impl Communicator {
    /// Runs collective `body` with the next sequence number; on failure the
    /// communicator is closed, as for every collective.
    pub(crate) fn collective<R>(
        &mut self,
        body: impl FnOnce(&Communicator, u64) -> Result<R>,
    ) -> Result<R> {
        self.check_usable()?;
        let seq = self.seq;
        self.seq += 1;
        let result = body(self, seq);
        self.settle(result)
    }

    /// Fails the collective that is starting (closing the communicator, so
    /// peers fail fast instead of waiting) because of a bad argument.
    pub(crate) fn refuse<R>(&mut self, message: String) -> Result<R> {
        self.check_usable()?;
        self.settle(Err(Error::InvalidArgument(message)))
    }

    /// Sends `message(peer)` (exactly `len` bytes, at most
    /// [`INLINE_SEND_MAX`]) to every peer, then receives `len` bytes from
    /// every peer. Returns what each rank sent this one, with this rank's own
    /// message at its index.
    pub(crate) fn exchange_small(
        &self,
        message: impl Fn(usize) -> Vec<u8>,
        len: usize,
        kind: Kind,
    ) -> Result<Vec<Vec<u8>>> {
        debug_assert!(len <= INLINE_SEND_MAX);
        let (n, r) = (self.size(), self.rank());
        for peer in (0..n).filter(|&p| p != r) {
            let bytes = message(peer);
            debug_assert_eq!(bytes.len(), len);
            self.link(peer)?.send(&bytes, kind.name())?;
        }
        let mut received = vec![vec![0u8; len]; n];
        received[r] = message(r);
        for (peer, buf) in received.iter_mut().enumerate() {
            if peer != r {
                self.link(peer)?.recv(buf, kind.name())?;
            }
        }
        Ok(received)
    }

    /// Every rank's `count` in rank order (an allgather's block lengths);
    /// `header` is the collective's, checked on every message beyond
    /// [`DIRECT_RANKS_MAX`] ranks.
    pub(crate) fn allgather_counts(
        &self,
        count: usize,
        header: &Header,
        kind: Kind,
    ) -> Result<Vec<usize>> {
        let n = self.size();
        if n <= DIRECT_RANKS_MAX {
            return self.exchange_counts(|_| count, kind);
        }
        let mut known = vec![UNKNOWN_COUNT; n];
        known[self.rank()] = count as u64;
        self.recursive_doubling(
            kind,
            header,
            known.as_mut_slice(),
            8 * n,
            |known| known.iter().flat_map(|c| c.to_le_bytes()).collect(),
            |known, theirs| {
                for (mine, bytes) in known.iter_mut().zip(theirs.chunks_exact(8)) {
                    if *mine == UNKNOWN_COUNT {
                        *mine = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                    }
                }
                Ok(())
            },
        )?;
        known
            .into_iter()
            .enumerate()
            .map(|(peer, count)| {
                usize::try_from(count)
                    .ok()
                    .filter(|_| count != UNKNOWN_COUNT)
                    .ok_or_else(|| Error::ControlMessage {
                        detail: format!(
                            "no count of rank {peer} reached this rank during {}",
                            kind.name()
                        ),
                    })
            })
            .collect()
    }

    /// Sends `u64` values, one per peer, and returns the one each peer sent
    /// this rank (this rank's own at its index).
    pub(crate) fn exchange_counts(
        &self,
        count: impl Fn(usize) -> usize,
        kind: Kind,
    ) -> Result<Vec<usize>> {
        let received =
            self.exchange_small(|peer| (count(peer) as u64).to_le_bytes().to_vec(), 8, kind)?;
        received
            .iter()
            .enumerate()
            .map(|(peer, bytes)| {
                let mut fixed = [0u8; 8];
                fixed.copy_from_slice(bytes);
                usize::try_from(u64::from_le_bytes(fixed)).map_err(|_| Error::Mismatch {
                    rank: peer,
                    detail: format!(
                        "it sent a count too large for this rank during {}",
                        kind.name()
                    ),
                })
            })
            .collect()
    }
}

/// Sends `outgoing` on `to` while receiving `incoming` from `from` (either
/// may be empty). If either side fails, both links are shut down to wake the
/// other side, and the first error is returned.
pub(crate) fn send_recv(
    to: &Link,
    outgoing: &[u8],
    from: &Link,
    incoming: &mut [u8],
    kind: Kind,
) -> Result<()> {
    let during = kind.name();
    if outgoing.len() <= INLINE_SEND_MAX {
        to.send(outgoing, during)?;
        return from.recv(incoming, during);
    }
    let first = FirstError::default();
    thread::scope(|scope| {
        let sender = thread::Builder::new()
            .name("hvd-send".into())
            .spawn_scoped(scope, || {
                if let Err(e) = to.send(outgoing, during) {
                    first.record(e);
                    from.shutdown();
                }
            });
        if let Err(e) = sender {
            first.record(Error::io("spawning a sender thread", e));
            return;
        }
        if let Err(e) = from.recv(incoming, during) {
            first.record(e);
            to.shutdown();
        }
    });
    first.into_result()
}

/// The consecutive ranges `counts` cover, in order, starting at 0; `None`
/// when their sum overflows.
pub(crate) fn blocks(counts: &[usize]) -> Option<Vec<Range<usize>>> {
    let mut start = 0usize;
    counts
        .iter()
        .map(|&count| {
            let end = start.checked_add(count)?;
            let range = start..end;
            start = end;
            Some(range)
        })
        .collect()
}

/// Runs `body` on every rank of a fresh `size`-rank TCP mesh (threads of this
/// process) for the collectives' tests; returns each rank's result in rank order.
#[cfg(test)]
pub(crate) fn on_mesh<R: Send + 'static>(
    size: usize,
    body: impl Fn(usize, &mut Communicator) -> Result<R> + Send + Sync + Clone + 'static,
) -> Vec<Result<R>> {
    run_ranks(size, false, body)
}

/// [`on_mesh`] with each rank on a host of its own (`CommConfig::hostname`),
/// as the ranks of a job across machines are.
#[cfg(test)]
pub(crate) fn on_hosts<R: Send + 'static>(
    size: usize,
    body: impl Fn(usize, &mut Communicator) -> Result<R> + Send + Sync + Clone + 'static,
) -> Vec<Result<R>> {
    run_ranks(size, true, body)
}

#[cfg(test)]
fn run_ranks<R: Send + 'static>(
    size: usize,
    own_hosts: bool,
    body: impl Fn(usize, &mut Communicator) -> Result<R> + Send + Sync + Clone + 'static,
) -> Vec<Result<R>> {
    use crate::config::{CommConfig, TransportPolicy};
    use crate::rendezvous::{connect, Listener};
    use std::sync::mpsc;
    use std::time::Duration;

    let listeners: Vec<Listener> = (0..size)
        .map(|_| Listener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addresses: Vec<String> = listeners
        .iter()
        .map(|l| format!("127.0.0.1:{}", l.port()))
        .collect();
    let config = CommConfig {
        connect_timeout: Duration::from_secs(30),
        io_timeout: Duration::from_secs(30),
        transport: TransportPolicy::Tcp,
        ..CommConfig::default()
    };
    let (tx, rx) = mpsc::channel();
    for (rank, listener) in listeners.into_iter().enumerate() {
        let (addresses, mut config, tx, body) =
            (addresses.clone(), config.clone(), tx.clone(), body.clone());
        if own_hosts {
            config.hostname = Some(format!("host-{rank}"));
        }
        thread::spawn(move || {
            let result = connect(listener, rank, &addresses, b"secret", &config)
                .and_then(|mut comm| body(rank, &mut comm));
            let _ = tx.send((rank, result));
        });
    }
    drop(tx);
    let mut results: Vec<Option<Result<R>>> = (0..size).map(|_| None).collect();
    for _ in 0..size {
        let (rank, result) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        results[rank] = Some(result);
    }
    results.into_iter().map(Option::unwrap).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_jobs_allgather_gathers_blocks_of_every_length() {
        for size in [DIRECT_RANKS_MAX, DIRECT_RANKS_MAX + 1, DIRECT_RANKS_MAX + 3] {
            // Rank r contributes r elements of value r (rank 0 none).
            let results = on_mesh(size, |rank, comm| comm.allgather(&vec![rank as i32; rank]));
            let expected: Vec<i32> = (0..size).flat_map(|r| vec![r as i32; r]).collect();
            for (rank, result) in results.into_iter().enumerate() {
                let (gathered, counts) = result.unwrap();
                assert_eq!(
                    counts,
                    (0..size).collect::<Vec<_>>(),
                    "size {size} rank {rank}"
                );
                assert_eq!(gathered, expected, "size {size} rank {rank}");
            }
        }
    }

    #[test]
    fn blocks_are_consecutive_and_overflow_is_caught() {
        assert_eq!(blocks(&[2, 0, 3]), Some(vec![0..2, 2..2, 2..5]));
        assert_eq!(blocks(&[]), Some(vec![]));
        assert_eq!(blocks(&[usize::MAX, 1]), None);
    }
}
