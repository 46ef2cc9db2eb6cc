//! Hierarchical allreduce, for jobs whose ranks sit on several hosts with
//! more than one rank on some of them (Horovod's `HOROVOD_HIERARCHICAL_ALLREDUCE`).
//!
//! A flat TCP ring sends every byte through the network stack at every rank,
//! even between two ranks of one host. Here the ranks of a host first
//! reduce among themselves through shared memory, one rank per host (its
//! lowest, the leader) reduces across hosts over TCP, and the host's ranks
//! then take the leader's result, again through shared memory: only one
//! rank per host touches the network.
//!
//! The two levels are communicators of their own over the job's existing
//! connections (each link's socket is shared, never used by two
//! communicators at once: this module runs them one after the other on the
//! calling thread). Every rank groups the ranks by the host part of their
//! addresses in the same way, so every rank builds the same levels.

use crate::communicator::{CommConfig, Communicator, Transport};
use crate::error::Result;
use crate::link::Link;
use crate::reduce::{Element, ReduceOp};
use crate::shm;

/// This rank's two levels.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    /// The ranks of this host, through shared memory where it maps.
    local: Communicator,
    /// The leaders of every host, over TCP; `None` on ranks that lead
    /// nothing.
    cross: Option<Communicator>,
    /// Ranks in the whole job, for `Average`.
    size: usize,
}

/// The host part of a "host:port" address.
pub(crate) fn host(address: &str) -> &str {
    address.rsplit_once(':').map_or(address, |(host, _)| host)
}

/// Ranks grouped by host, in order of each host's lowest rank.
fn hosts(addresses: &[String]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (rank, address) in addresses.iter().enumerate() {
        let name = host(address);
        match groups.iter_mut().find(|(h, _)| *h == name) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((name, vec![rank])),
        }
    }
    groups.into_iter().map(|(_, ranks)| ranks).collect()
}

impl Hierarchy {
    /// The levels for `rank`, when they help: with `Transport::Auto`, more
    /// than one host, and more than one rank on some host. Every rank calls
    /// it at the same point of the rendezvous.
    pub(crate) fn build(
        rank: usize,
        links: &[Option<Link>],
        addresses: &[String],
        config: &CommConfig,
    ) -> Result<Option<Hierarchy>> {
        let groups = hosts(addresses);
        let helps = groups.len() > 1 && groups.iter().any(|g| g.len() > 1);
        if config.transport != Transport::Auto || !helps {
            return Ok(None);
        }
        let Some(mine) = groups.iter().find(|g| g.contains(&rank)) else {
            return Ok(None);
        };
        let local_addresses: Vec<String> = mine.iter().map(|&r| addresses[r].clone()).collect();
        let local_links = sub_links(rank, mine, links)?;
        let local_rank = position(mine, rank);
        let local_shm = shm::negotiate(local_rank, &local_links, &local_addresses, config)?
            .map(|shm| shm.without_spinning());
        let local = Communicator::new(local_rank, mine.len(), local_links).with_shm(local_shm);
        let leaders: Vec<usize> = groups.iter().map(|g| g[0]).collect();
        let cross = if leaders.contains(&rank) {
            let cross_links = sub_links(rank, &leaders, links)?;
            Some(Communicator::new(
                position(&leaders, rank),
                leaders.len(),
                cross_links,
            ))
        } else {
            None
        };
        Ok(Some(Hierarchy {
            local,
            cross,
            size: addresses.len(),
        }))
    }

    /// Allreduce in three steps: within the host, across the leaders, back
    /// within the host.
    pub(crate) fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let summing = matches!(op, ReduceOp::Sum | ReduceOp::Average);
        let step = if summing { ReduceOp::Sum } else { op };
        self.local.allreduce(data, step)?;
        if let Some(cross) = &mut self.cross {
            cross.allreduce(data, step)?;
        }
        if summing {
            // The leader's result to the others through shared memory: a sum
            // in which every rank but the leader adds zeros.
            if self.local.rank() != 0 {
                data.fill(T::ZERO);
            }
            self.local.allreduce(data, ReduceOp::Sum)?;
        } else {
            self.local.broadcast(data, 0)?;
        }
        if op == ReduceOp::Average {
            T::divide(data, self.size);
        }
        Ok(())
    }
}

fn position(ranks: &[usize], rank: usize) -> usize {
    ranks.iter().position(|&r| r == rank).unwrap_or(0)
}

/// Links to `members` (global ranks), indexed by position among them, each
/// sharing the socket of the job's link.
fn sub_links(rank: usize, members: &[usize], links: &[Option<Link>]) -> Result<Vec<Option<Link>>> {
    members
        .iter()
        .map(|&member| {
            if member == rank {
                return Ok(None);
            }
            match links.get(member).and_then(Option::as_ref) {
                Some(link) => link.try_clone().map(Some),
                None => Err(crate::error::Error::Unusable {
                    cause: format!("rank {rank} has no connection to rank {member}"),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_group_by_host_in_order_of_their_lowest_rank() {
        let addresses: Vec<String> = ["b:1", "a:2", "b:3", "c:4", "a:5"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(hosts(&addresses), vec![vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(host("[::1]:80"), "[::1]");
    }
}
