//! A rank's end of the mesh: a link to each rank it talks to, by rank. What
//! the TCP algorithms run on.
//!
//! The job's links open on first use ([`Connections`]): a collective asks
//! for the link to a peer, and the first ask dials it ([`dial`]) while an
//! acceptor thread takes the peers' dials ([`accept`]); two ranks dialling
//! each other at once keep one connection ([`pairs`]). So a rank holds the
//! links its collectives use (the ring's neighbours, the log2 N partners of
//! recursive doubling and the binomial trees, its host's ranks) and not a
//! link to every rank: beyond [`DIRECT_RANKS_MAX`] ranks, sockets per rank
//! grow with log2 N, not N, until a collective that talks to everyone
//! (alltoall) runs.
//!
//! A [`Mesh`] is one communicator's view of the connections: the job's
//! ranks, or a subset (a hierarchy's level) numbered in its own order,
//! sharing the job's links.

pub(crate) mod accept;
pub(crate) mod dial;
pub(crate) mod job;
mod pairs;

use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::link::Link;
use dial::Dialler;

/// The largest job whose ranks exchange small messages (headers, counts,
/// small allreduces) directly with every peer, one round of N - 1 messages;
/// beyond, they take ⌈log2 N⌉ rounds of recursive doubling with one peer
/// each, and so open log2 N links instead of N - 1.
pub(crate) const DIRECT_RANKS_MAX: usize = 8;

/// The links of one rank of a job, each opened when first needed.
#[derive(Debug)]
pub(crate) struct Connections {
    /// This rank, in the job.
    rank: usize,
    /// `cells[r]` holds the link to rank `r` once opened; never at `rank`.
    cells: Vec<OnceLock<Link>>,
    /// Opens the links not given up front; `None` when all were.
    dialler: Option<Dialler>,
}

impl Connections {
    /// Connections of `rank` that open each link with `dialler`.
    pub(crate) fn dialling(rank: usize, size: usize, dialler: Dialler) -> Connections {
        Connections {
            rank,
            cells: (0..size).map(|_| OnceLock::new()).collect(),
            dialler: Some(dialler),
        }
    }

    /// Connections of `rank` over `links`, one for every rank but `rank`
    /// (or `None` where the rank has no link), opened already.
    pub(crate) fn fixed(rank: usize, links: Vec<Option<Link>>) -> Connections {
        debug_assert!(rank < links.len() && links[rank].is_none());
        Connections {
            rank,
            cells: links
                .into_iter()
                .map(|link| match link {
                    Some(link) => OnceLock::from(link),
                    None => OnceLock::new(),
                })
                .collect(),
            dialler: None,
        }
    }

    /// The link to job rank `peer`, opened now if it was not.
    fn link(&self, peer: usize) -> Result<&Link> {
        let no_link = || Error::Unusable {
            cause: format!("rank {} has no connection to rank {peer}", self.rank),
        };
        let cell = self
            .cells
            .get(peer)
            .filter(|_| peer != self.rank)
            .ok_or_else(no_link)?;
        if let Some(link) = cell.get() {
            return Ok(link);
        }
        let dialler = self.dialler.as_ref().ok_or_else(no_link)?;
        // Only the thread running this rank's collectives opens links, so
        // the cell is still empty.
        let _ = cell.set(dialler.open(peer)?);
        cell.get().ok_or_else(no_link)
    }

    /// The job has joined: dials after this one get time of their own.
    pub(crate) fn joined(&self) {
        if let Some(dialler) = &self.dialler {
            dialler.joined();
        }
    }

    /// Every link, opened or opened from now on, polls before it sleeps.
    /// Needs the connections unshared: before any level borrows them.
    pub(crate) fn poll_busily(&mut self) {
        if let Some(dialler) = &self.dialler {
            dialler.poll_busily();
        }
        for cell in &mut self.cells {
            if let Some(link) = cell.take() {
                let _ = cell.set(link.busy_polling());
            }
        }
    }

    /// Shuts every link down, so peers blocked on this rank fail at once,
    /// and stops opening links.
    fn shutdown(&self) {
        // The links first: peers blocked on this rank fail before anything
        // here waits for the acceptor.
        for link in self.cells.iter().filter_map(OnceLock::get) {
            link.shutdown();
        }
        if let Some(dialler) = &self.dialler {
            dialler.close();
        }
    }
}

/// One communicator's view of a rank's connections.
#[derive(Debug)]
pub(crate) struct Mesh {
    /// This rank, in `0..size`.
    rank: usize,
    /// The job rank of each of this mesh's ranks; `None` when they are the
    /// job's own.
    members: Option<Vec<usize>>,
    connections: Arc<Connections>,
}

impl Mesh {
    /// The mesh of `rank` over `links`, which holds a link for every rank
    /// but `rank`.
    pub(crate) fn new(rank: usize, links: Vec<Option<Link>>) -> Mesh {
        Mesh::over(Connections::fixed(rank, links))
    }

    /// The mesh of all ranks of `connections`.
    pub(crate) fn over(connections: Connections) -> Mesh {
        Mesh {
            rank: connections.rank,
            members: None,
            connections: Arc::new(connections),
        }
    }

    /// The mesh of `members` (ranks of this mesh, this rank among them),
    /// numbered in their order, on the same links.
    pub(crate) fn subset(&self, members: &[usize]) -> Mesh {
        let members: Vec<usize> = members.iter().map(|&m| self.job_rank(m)).collect();
        let me = self.job_rank(self.rank);
        Mesh {
            rank: members.iter().position(|&m| m == me).unwrap_or(0),
            members: Some(members),
            connections: Arc::clone(&self.connections),
        }
    }

    fn job_rank(&self, rank: usize) -> usize {
        match &self.members {
            Some(members) => members.get(rank).copied().unwrap_or(usize::MAX),
            None => rank,
        }
    }

    /// This rank, in `0..size`.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks the mesh joins.
    pub(crate) fn size(&self) -> usize {
        match &self.members {
            Some(members) => members.len(),
            None => self.connections.cells.len(),
        }
    }

    /// The link to `rank`, opened now if it was not.
    pub(crate) fn link(&self, rank: usize) -> Result<&Link> {
        self.connections.link(self.job_rank(rank))
    }

    /// Opens the link to every rank of the mesh.
    pub(crate) fn open_all(&self) -> Result<()> {
        (0..self.size())
            .filter(|&r| r != self.rank)
            .try_for_each(|r| self.link(r).map(drop))
    }

    /// The links to this mesh's ranks that are open.
    pub(crate) fn opened(&self) -> impl Iterator<Item = &Link> {
        (0..self.size())
            .filter(move |&r| r != self.rank)
            .filter_map(move |r| self.connections.cells.get(self.job_rank(r))?.get())
    }

    /// The job's connections, while no other mesh shares them.
    pub(crate) fn connections_mut(&mut self) -> Option<&mut Connections> {
        Arc::get_mut(&mut self.connections)
    }

    /// The job has joined ([`Connections::joined`]).
    pub(crate) fn joined(&self) {
        self.connections.joined();
    }

    /// Shuts this mesh's links down, so peers blocked on this rank fail at
    /// once; the job's mesh also stops opening links.
    pub(crate) fn shutdown(&self) {
        match &self.members {
            None => self.connections.shutdown(),
            Some(_) => self.opened().for_each(Link::shutdown),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use crate::collectives::on_hosts;
    use crate::reduce::ReduceOp;

    #[test]
    fn links_open_when_a_collective_first_needs_them() {
        const N: usize = 17;
        let results = on_hosts(N, |rank, comm| {
            let joined = comm.links_open();
            let mut small = [rank as f32; 3];
            comm.allreduce(&mut small, ReduceOp::Sum)?;
            let mut chain = vec![0u8; 10];
            comm.broadcast(&mut chain, 0)?;
            comm.allgather(&[rank as i32])?;
            let logarithmic = comm.links_open();
            let counts = vec![1; N];
            comm.alltoall(&[rank as u8; N], &counts)?;
            Ok((joined, logarithmic, comm.links_open(), small[0]))
        });
        let bound = 2 * N.ilog2() as usize + 3;
        for (rank, result) in results.into_iter().enumerate() {
            let (joined, logarithmic, all, sum) = result.unwrap();
            assert_eq!(sum, (N * (N - 1) / 2) as f32);
            // The join's two binomial trees: at most log2 N + 1 peers.
            assert!(
                joined <= N.ilog2() as usize + 1,
                "rank {rank}: {joined} at join"
            );
            // Recursive doubling, the ring's neighbours and the trees.
            assert!(logarithmic <= bound, "rank {rank}: {logarithmic} links");
            // Alltoall talks to everyone.
            assert_eq!(all, N - 1, "rank {rank}");
        }
    }

    #[test]
    fn a_link_to_a_rank_that_ended_fails_at_once_naming_it() {
        // Ranks 1 and 3 of four never talk at join (its trees are 3 → 2 → 0
        // and 1 → 0); rank 3 then ends.
        let ended = Arc::new(Barrier::new(4));
        let results = on_hosts(4, move |rank, comm| {
            if rank == 3 {
                let links = comm.links_open();
                drop(std::mem::replace(
                    comm,
                    crate::Communicator::over(super::Mesh::new(0, vec![None])),
                ));
                ended.wait();
                return Ok(Some(format!("{links} links")));
            }
            ended.wait();
            if rank != 1 {
                return Ok(None);
            }
            let started = std::time::Instant::now();
            let err = comm.link(3).map(drop).unwrap_err();
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            Ok(Some(err.to_string()))
        });
        let said = results[1].as_ref().unwrap().clone().unwrap();
        assert!(said.starts_with("connection to rank 3 lost"), "{said}");
        assert!(said.contains("refused the connection"), "{said}");
        assert_eq!(results[3].as_ref().unwrap().as_deref(), Some("1 links"));
    }
}
