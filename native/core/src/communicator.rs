//! One rank's end of the mesh, and its allreduce and barrier.
//!
//! Allreduce runs through shared memory when every rank is on this host
//! ([`crate::shm`]) and over TCP otherwise ([`crate::tcp`], which picks an
//! algorithm by message size). Barrier is a dissemination barrier over the
//! links ([`Mesh`]). Ranks on several hosts with some sharing one reduce
//! through the levels of [`hierarchy`], which are communicators themselves.
//!
//! Every collective starts with a header exchange ([`crate::wire::Header`]) so
//! that ranks calling different collectives fail with `Mismatch`. After any
//! failure the communicator closes all its connections, so its peers fail
//! fast with `PeerLost` instead of waiting for a timeout, and later calls
//! return `Unusable`.

use log::debug;

pub(crate) mod hierarchy;

use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::mesh::Mesh;
use crate::reduce::{Element, ReduceOp};
use crate::shm::{self, ShmTransport};
use crate::tcp;
use crate::wire::{Header, Kind};
use hierarchy::Hierarchy;

/// One rank's end of an authenticated mesh among `size` ranks, its links
/// opened on first use.
///
/// Dropping it closes its connections; peers blocked on it then fail with
/// `PeerLost` naming this rank.
#[derive(Debug)]
pub struct Communicator {
    /// The links to the other ranks.
    mesh: Mesh,
    /// Number of collectives started, the sequence number of the next one.
    pub(crate) seq: u64,
    /// Message of the failure that broke this communicator.
    failure: Option<String>,
    /// The shared memory transport, when every rank is on this host; the
    /// collectives then use it instead of the links.
    shm: Option<ShmTransport>,
    /// Per-host and cross-host levels for allreduce, when the ranks span
    /// several hosts and share some ([`hierarchy`]).
    hierarchy: Option<Box<Hierarchy>>,
    /// Every rank's host, in rank order (`crate::hosts`); empty on a
    /// hierarchy's levels, which never need them.
    hosts: Vec<String>,
}

impl Communicator {
    /// A communicator over `links`, which holds a link for every rank but
    /// `rank`.
    #[cfg(test)]
    pub(crate) fn new(rank: usize, size: usize, links: Vec<Option<Link>>) -> Communicator {
        debug_assert_eq!(links.len(), size);
        Communicator::over(Mesh::new(rank, links))
    }

    /// A communicator over `mesh`, on TCP until told otherwise.
    pub(crate) fn over(mesh: Mesh) -> Communicator {
        Communicator {
            mesh,
            seq: 0,
            failure: None,
            shm: None,
            hierarchy: None,
            hosts: Vec::new(),
        }
    }

    /// Settles the transport of a job's communicator once every rank's host
    /// is known (rank r is on `hosts[r]`), on what `config`'s policy and the
    /// hosts allow: shared memory when every rank is on this host, else the
    /// hierarchical levels where they help, else TCP. Every rank calls it at
    /// the same point; its collectives count from 0 again afterwards.
    pub(crate) fn settle_transport(
        &mut self,
        hosts: Vec<String>,
        config: &CommConfig,
    ) -> Result<()> {
        let rank = self.rank();
        self.mesh.joined();
        // A job of one rank needs neither shared memory nor levels.
        let shm = match hosts.len() {
            1 => None,
            _ => shm::negotiate(rank, &self.mesh, &hosts, config)?,
        };
        let hierarchy = match shm {
            Some(_) => None,
            None => Hierarchy::build(rank, &self.mesh, &hosts, config)?,
        };
        debug!(
            "rank {rank}: joined {} ranks; shared memory: {}; hierarchical: {}",
            hosts.len(),
            shm.is_some(),
            hierarchy.is_some()
        );
        self.shm = shm;
        self.hierarchy = hierarchy.map(Box::new);
        self.hosts = hosts;
        self.seq = 0;
        Ok(())
    }

    /// Every link, opened already or later, polls before it sleeps (this
    /// host has a core for each of its ranks). Before the transport is
    /// settled.
    pub(crate) fn poll_busily(&mut self) {
        if let Some(connections) = self.mesh.connections_mut() {
            connections.poll_busily();
        }
    }

    /// How many links to other ranks this rank has open (links open on
    /// first use).
    pub fn links_open(&self) -> usize {
        self.mesh.opened().count()
    }

    /// Every rank's host, in rank order: the host part of its address, or
    /// the name it was given (`CommConfig::hostname`).
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// This communicator, running its collectives through `shm` if given.
    pub(crate) fn with_shm(mut self, shm: Option<ShmTransport>) -> Communicator {
        self.shm = shm;
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
        self.mesh.rank()
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.mesh.size()
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
        if self.size() == 1 {
            return Ok(());
        }
        let header = Header::allreduce(self.seq, T::CODE, op, data.len());
        self.seq += 1;
        let result = match (&mut self.shm, &mut self.hierarchy) {
            (Some(shm), _) => shm.allreduce(&self.mesh, data, op, &header),
            // The levels exchange headers of their own.
            (None, Some(hierarchy)) => hierarchy.allreduce(data, op),
            (None, None) => tcp::allreduce(&self.mesh, data, op, &header),
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
        self.on_shards(header, |shm, mesh, header| {
            shm.reduce_scatter_shards(mesh, data, op, header)
        })
    }

    /// The allgather half: every rank ends with every rank's shard of `data`.
    pub(crate) fn allgather_shards<T: Element>(&mut self, data: &mut [T]) -> Result<()> {
        let len = data.len();
        let header = |seq| Header::new(seq, Kind::Allgather, T::CODE, None, len, 0);
        self.on_shards(header, |shm, mesh, header| {
            shm.allgather_shards(mesh, data, header)
        })
    }

    /// Runs a half of a sharded allreduce on the shared memory transport.
    fn on_shards(
        &mut self,
        header: impl FnOnce(u64) -> Header,
        run: impl FnOnce(&mut ShmTransport, &Mesh, &Header) -> Result<()>,
    ) -> Result<()> {
        self.check_usable()?;
        if self.size() == 1 {
            return Ok(());
        }
        let header = header(self.seq);
        self.seq += 1;
        let result = match &mut self.shm {
            Some(shm) => run(shm, &self.mesh, &header),
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
        if self.size() == 1 {
            return Ok(());
        }
        let header = Header::barrier(self.seq);
        self.seq += 1;
        let result = match &mut self.shm {
            Some(shm) => shm.barrier(&self.mesh, &header),
            None => self.dissemination_barrier(&header),
        };
        self.settle(result)
    }

    /// Dissemination barrier: in round `k` rank `r` signals rank `r + 2^k`
    /// and waits for rank `r - 2^k`; after `ceil(log2 size)` rounds every rank
    /// has transitively heard from every other.
    fn dissemination_barrier(&self, header: &Header) -> Result<()> {
        let (n, r) = (self.size(), self.rank());
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
                self.rank()
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
        self.mesh.shutdown();
    }

    pub(crate) fn link(&self, rank: usize) -> Result<&Link> {
        self.mesh.link(rank)
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

/// Sends `ours` on `to`, receives the header from `from`, and requires them
/// to be equal.
fn exchange_headers(to: &Link, from: &Link, ours: &Header, during: &str) -> Result<()> {
    to.send(&ours.encode(), during)?;
    from.receive_header(ours, during)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::thread;
    use std::time::Duration;

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
}
