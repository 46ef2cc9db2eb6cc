//! One rank's end of the mesh, and its allreduce and barrier.
//!
//! Allreduce runs through shared memory when every rank is on this host
//! ([`crate::shm`]) and over TCP otherwise ([`crate::tcp`], which picks an
//! algorithm by message size). Barrier is a dissemination barrier over the
//! links. [`segment`] is the split of data into per-rank segments that the
//! ring, the owners algorithm and reducescatter share.
//!
//! Every collective starts with a header exchange ([`crate::wire::Header`]) so
//! that ranks calling different collectives fail with `Mismatch`. After any
//! failure the communicator closes all its connections, so its peers fail
//! fast with `PeerLost` instead of waiting for a timeout, and later calls
//! return `Unusable`.

use std::ops::Range;
use std::time::Duration;

use log::debug;

use crate::error::{Error, Result};
use crate::hierarchy::Hierarchy;
use crate::link::Link;
use crate::reduce::{Element, ReduceOp};
use crate::shm::ShmTransport;
use crate::tcp;
use crate::wire::{Header, Kind, HEADER_LEN};

/// Which transport the collectives of a communicator use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// Shared memory when every rank is on this host (all addresses have the
    /// same host part), TCP otherwise.
    #[default]
    Auto,
    /// TCP between all ranks, even on one host.
    Tcp,
    /// As `Auto` on one host; across hosts flat TCP between all ranks,
    /// never the hierarchical allreduce (Horovod's
    /// `HOROVOD_HIERARCHICAL_ALLREDUCE=0`).
    Flat,
}

/// Timeouts and transport of rendezvous and of collectives.
#[derive(Clone, Debug)]
pub struct CommConfig {
    /// How long `connect` waits, in total, for all peers to connect and
    /// authenticate.
    pub connect_timeout: Duration,
    /// How long a single read or write on a connection may block.
    pub io_timeout: Duration,
    /// Which transport collectives use; every rank must be given the same.
    pub transport: Transport,
    /// Whether the links are encrypted (TLS 1.3, `HOROVOD_RS_TLS`);
    /// every rank must be given the same.
    pub tls: bool,
}

impl Default for CommConfig {
    /// 120 s to connect, 600 s per read or write, [`Transport::Auto`],
    /// not encrypted.
    fn default() -> Self {
        CommConfig {
            connect_timeout: Duration::from_secs(120),
            io_timeout: Duration::from_secs(600),
            transport: Transport::Auto,
            tls: false,
        }
    }
}

/// One rank's end of an authenticated full mesh among `size` ranks.
///
/// Dropping it closes its connections; peers blocked on it then fail with
/// `PeerLost` naming this rank.
#[derive(Debug)]
pub struct Communicator {
    rank: usize,
    size: usize,
    /// `links[r]` is the connection to rank `r`; `None` at this rank's index.
    links: Vec<Option<Link>>,
    /// Number of collectives started, the sequence number of the next one.
    pub(crate) seq: u64,
    /// Message of the failure that broke this communicator.
    failure: Option<String>,
    /// The shared memory transport, when every rank is on this host; the
    /// collectives then use it instead of the links.
    shm: Option<ShmTransport>,
    /// Per-host and cross-host levels for allreduce, when the ranks span
    /// several hosts and share some ([`crate::hierarchy`]).
    hierarchy: Option<Box<Hierarchy>>,
}

impl Communicator {
    /// A communicator over `links`, which holds a link for every rank but
    /// `rank`.
    pub(crate) fn new(rank: usize, size: usize, links: Vec<Option<Link>>) -> Communicator {
        debug_assert_eq!(links.len(), size);
        Communicator {
            rank,
            size,
            links,
            seq: 0,
            failure: None,
            shm: None,
            hierarchy: None,
        }
    }

    /// This communicator, running its collectives through `shm` if given.
    pub(crate) fn with_shm(mut self, shm: Option<ShmTransport>) -> Communicator {
        self.shm = shm;
        self
    }

    /// This communicator, running allreduce through `hierarchy` if given.
    pub(crate) fn with_hierarchy(mut self, hierarchy: Option<Hierarchy>) -> Communicator {
        self.hierarchy = hierarchy.map(Box::new);
        self
    }

    /// Whether collectives go through shared memory (every rank is on this
    /// host and the transport is `Auto`) rather than TCP.
    pub fn uses_shared_memory(&self) -> bool {
        self.shm.is_some()
    }

    /// Whether allreduce is hierarchical: ranks on several hosts, some
    /// sharing one, reduce within each host (through shared memory where
    /// it maps) and across hosts over TCP.
    pub fn is_hierarchical(&self) -> bool {
        self.hierarchy.is_some()
    }

    /// This rank, in `0..size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Reduces `data` element-wise across all ranks with `op`, in place:
    /// every rank ends with the same result. All ranks must call it with the
    /// same element type, length and operation.
    ///
    /// # Errors
    /// `PeerLost` or `Timeout` naming the peer whose connection failed,
    /// `Mismatch` when a neighbour called another collective, `Unusable` once
    /// an earlier collective failed. After any error the communicator is
    /// closed.
    pub fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        self.check_usable()?;
        if self.size == 1 {
            return Ok(());
        }
        let header = Header::allreduce(self.seq, T::CODE, op, data.len());
        self.seq += 1;
        let result = match (&mut self.shm, &mut self.hierarchy) {
            (Some(shm), _) => shm.allreduce(&self.links, data, op, &header),
            // The levels exchange headers of their own.
            (None, Some(hierarchy)) => hierarchy.allreduce(data, op),
            (None, None) => tcp::allreduce(self, data, op, &header),
        };
        self.settle(result)
    }

    /// The reduce-scatter half of an allreduce through shared memory: this
    /// rank's shard of `data` (`segment(len, size, rank)`) ends reduced with
    /// `op` across the ranks, not divided for `Average`; the rest is
    /// unchanged. For the hierarchical allreduce, which checks
    /// [`Communicator::uses_shared_memory`] first.
    pub(crate) fn reduce_scatter_shards<T: Element>(
        &mut self,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let len = data.len();
        let header = |seq| Header::new(seq, Kind::Reducescatter, T::CODE, Some(op), len, 0);
        self.on_shards(header, |shm, links, header| {
            shm.reduce_scatter_shards(links, data, op, header)
        })
    }

    /// The allgather half: every rank ends with every rank's shard of `data`.
    pub(crate) fn allgather_shards<T: Element>(&mut self, data: &mut [T]) -> Result<()> {
        let len = data.len();
        let header = |seq| Header::new(seq, Kind::Allgather, T::CODE, None, len, 0);
        self.on_shards(header, |shm, links, header| {
            shm.allgather_shards(links, data, header)
        })
    }

    /// Runs a half of a sharded allreduce on the shared memory transport.
    fn on_shards(
        &mut self,
        header: impl FnOnce(u64) -> Header,
        run: impl FnOnce(&mut ShmTransport, &[Option<Link>], &Header) -> Result<()>,
    ) -> Result<()> {
        self.check_usable()?;
        if self.size == 1 {
            return Ok(());
        }
        let header = header(self.seq);
        self.seq += 1;
        let result = match &mut self.shm {
            Some(shm) => run(shm, &self.links, &header),
            None => Err(Error::Unusable {
                cause: "shards are exchanged through shared memory, which this communicator lacks"
                    .into(),
            }),
        };
        self.settle(result)
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&mut self) -> Result<()> {
        self.check_usable()?;
        if self.size == 1 {
            return Ok(());
        }
        let header = Header::barrier(self.seq);
        self.seq += 1;
        let result = match &mut self.shm {
            Some(shm) => shm.barrier(&self.links, &header),
            None => self.dissemination_barrier(&header),
        };
        self.settle(result)
    }

    /// Dissemination barrier: in round `k` rank `r` signals rank `r + 2^k`
    /// and waits for rank `r - 2^k`; after `ceil(log2 size)` rounds every rank
    /// has transitively heard from every other.
    fn dissemination_barrier(&self, header: &Header) -> Result<()> {
        let (n, r) = (self.size, self.rank);
        let mut distance = 1;
        while distance < n {
            let to = self.link((r + distance) % n)?;
            let from = self.link((r + n - distance) % n)?;
            exchange_headers(to, from, header, "barrier")?;
            distance *= 2;
        }
        Ok(())
    }

    pub(crate) fn check_usable(&self) -> Result<()> {
        match &self.failure {
            Some(cause) => Err(Error::Unusable {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// On failure, closes every connection so peers fail fast, and remembers
    /// why so later calls report it.
    pub(crate) fn settle<R>(&mut self, result: Result<R>) -> Result<R> {
        if let Err(error) = &result {
            debug!(
                "rank {}: collective failed, closing connections: {error}",
                self.rank
            );
            self.failure = Some(error.to_string());
            self.close();
        }
        result
    }

    fn close(&self) {
        if let Some(shm) = &self.shm {
            shm.abort();
        }
        for link in self.links.iter().flatten() {
            link.shutdown();
        }
    }

    pub(crate) fn link(&self, rank: usize) -> Result<&Link> {
        self.links
            .get(rank)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Unusable {
                cause: format!("rank {} has no connection to rank {rank}", self.rank),
            })
    }
}

impl Drop for Communicator {
    /// Shuts the connections down (not merely closes this process's
    /// descriptors), so peers see end-of-stream even if a descriptor was
    /// inherited elsewhere.
    fn drop(&mut self) {
        self.close();
    }
}

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

/// Sends `ours` on `to`, receives the header from `from`, and requires them
/// to be equal.
fn exchange_headers(to: &Link, from: &Link, ours: &Header, during: &str) -> Result<()> {
    to.send(&ours.encode(), during)?;
    receive_header(from, ours, during)
}

/// Receives the header from `from` and requires it to equal `ours`.
pub(crate) fn receive_header(from: &Link, ours: &Header, during: &str) -> Result<()> {
    let mut bytes = [0u8; HEADER_LEN];
    from.recv(&mut bytes, during)?;
    tcp::pump::check_header(from.rank(), &bytes, ours)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::thread;

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

    /// A two-rank communicator pair over loopback, in one process, for unit
    /// tests of code that runs on a communicator.
    pub(crate) fn pair() -> (Communicator, Communicator) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        let timeout = Duration::from_secs(10);
        let comm = |rank: usize, stream| {
            let mut links = vec![None, None];
            links[1 - rank] = Some(Link::new(1 - rank, stream, timeout).unwrap());
            Communicator::new(rank, 2, links)
        };
        (comm(0, a), comm(1, b))
    }

    #[test]
    fn mismatched_calls_are_reported_and_break_the_communicator() {
        let (mut c0, mut c1) = pair();
        let other = thread::spawn(move || {
            let mut data = vec![1.0f32; 12];
            let err = c1.allreduce(&mut data, ReduceOp::Sum).unwrap_err();
            (err.to_string(), c1)
        });
        let mut data = vec![1.0f32; 10];
        let err = c0.allreduce(&mut data, ReduceOp::Sum).unwrap_err();
        assert!(matches!(err, Error::Mismatch { rank: 1, .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "rank 1 disagrees with this rank: it called allreduce of 12 f32 (SUM) as \
             collective #0 while this rank called allreduce of 10 f32 (SUM) as collective #0"
        );
        let (other_err, _c1) = other.join().unwrap();
        assert!(other_err.contains("rank 0 disagrees"), "{other_err}");
        let again = c0.barrier().unwrap_err();
        assert!(matches!(again, Error::Unusable { .. }), "{again}");
    }

    #[test]
    fn dropped_peer_is_peer_lost() {
        let (mut c0, c1) = pair();
        drop(c1);
        let err = c0.allreduce(&mut [1.0f64; 3], ReduceOp::Max).unwrap_err();
        assert!(err.is_peer_lost(), "{err}");
        assert!(err
            .to_string()
            .starts_with("connection to rank 1 lost during allreduce"));
    }

    #[test]
    fn pair_allreduce_large_and_barrier() {
        let (mut c0, mut c1) = pair();
        let len = 300_001;
        let other = thread::spawn(move || {
            let mut data: Vec<i64> = (0..len as i64).map(|i| i * 2).collect();
            c1.allreduce(&mut data, ReduceOp::Average).unwrap();
            c1.barrier().unwrap();
            data
        });
        let mut data: Vec<i64> = (0..len as i64).collect();
        c0.allreduce(&mut data, ReduceOp::Average).unwrap();
        c0.barrier().unwrap();
        let theirs = other.join().unwrap();
        assert_eq!(data, theirs);
        assert!(data
            .iter()
            .enumerate()
            .all(|(i, v)| *v == (3 * i as i64) / 2));
    }
}
