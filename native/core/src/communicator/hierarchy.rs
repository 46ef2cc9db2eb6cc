//! Hierarchical allreduce, for jobs whose ranks sit on several hosts with
//! more than one rank on some of them (Horovod's `HOROVOD_HIERARCHICAL_ALLREDUCE`).
//!
//! A flat TCP ring sends every byte through the network stack at every rank,
//! even between two ranks of one host. Here the ranks of a host first
//! reduce among themselves through shared memory, then reduce across hosts
//! over TCP, and take the result back through shared memory. Two ways:
//! - *sharded*, when every host has the same number of ranks and shared
//!   memory, for messages of [`SHARDED_FROM`] bytes or more: a reduce-scatter
//!   within the host leaves local rank `i` with shard `i` reduced; local rank
//!   `i` of every host allreduces that shard over TCP (one communicator per
//!   local rank, all at once); an allgather within the host spreads the
//!   shards. Every rank carries `1 / local size` of the network work, and
//!   each level moves each byte once (as Horovod does with NCCL);
//! - *through leaders* otherwise: an allreduce within the host, the lowest
//!   rank of each host (its leader) allreduces across hosts, and the others
//!   take its result. Only one rank per host uses the network: fewer, larger
//!   messages, which is what small ones need.
//!
//! The levels are communicators of their own over the job's existing
//! connections (each link's socket is shared, never used by two
//! communicators at once: this module runs them one after the other on the
//! calling thread). Every rank groups the ranks by their hosts
//! (`crate::hosts`) in the same way, so every rank builds the same levels and
//! picks the same way for a message.

use super::Communicator;
use crate::config::{CommConfig, TransportPolicy};
use crate::error::Result;
use crate::mesh::Mesh;
use crate::partition::segment;
use crate::reduce::{Element, ReduceOp};
use crate::shm;

/// Messages of at least this many bytes are sharded when the hosts allow.
/// Measured with two simulated hosts of two ranks on one machine: sharding
/// is ahead from 4 KiB (23 us against 30-57 us) and 1.2-2.3x at 1-64 MiB;
/// at 4 bytes the leaders' way is (12 us against 20 us).
pub(crate) const SHARDED_FROM: usize = 4 << 10;

/// This rank's two levels.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    /// The ranks of this host, through shared memory where it maps.
    local: Communicator,
    /// Over TCP, the ranks of every host with this rank's local rank; when
    /// hosts differ in size, the leaders only (`None` on other ranks).
    cross: Option<Communicator>,
    /// Whether every rank has a cross-host communicator and the hosts
    /// share memory within: large messages can be sharded.
    sharded: bool,
    /// Ranks in the whole job, for `Average`.
    size: usize,
}

/// Ranks grouped by host, in order of each host's lowest rank.
fn groups(hosts: &[String]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (rank, name) in hosts.iter().enumerate() {
        match groups.iter_mut().find(|(h, _)| *h == name) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((name, vec![rank])),
        }
    }
    groups.into_iter().map(|(_, ranks)| ranks).collect()
}

impl Hierarchy {
    /// The levels for `rank`, when they help: with `TransportPolicy::Auto`, more
    /// than one host, and more than one rank on some host. Every rank calls
    /// it at the same point of the rendezvous.
    pub(crate) fn build(
        rank: usize,
        mesh: &Mesh,
        hosts: &[String],
        config: &CommConfig,
    ) -> Result<Option<Hierarchy>> {
        let groups = groups(hosts);
        let helps = groups.len() > 1 && groups.iter().any(|g| g.len() > 1);
        if config.transport != TransportPolicy::Auto || !helps {
            return Ok(None);
        }
        let Some(mine) = groups.iter().find(|g| g.contains(&rank)) else {
            return Ok(None);
        };
        let local_hosts: Vec<String> = mine.iter().map(|&r| hosts[r].clone()).collect();
        let local_mesh = mesh.subset(mine);
        let local_rank = local_mesh.rank();
        let local_shm = shm::negotiate(local_rank, &local_mesh, &local_hosts, config)?
            .map(|shm| shm.without_spinning());
        let local = Communicator::over(local_mesh).with_shm(local_shm);
        // Equal hosts: local rank i of every host; else the leaders only.
        let equal = groups.iter().all(|g| g.len() == mine.len());
        let peers: Vec<usize> = if equal {
            groups.iter().map(|g| g[local_rank]).collect()
        } else {
            groups.iter().map(|g| g[0]).collect()
        };
        let mut cross = peers
            .contains(&rank)
            .then(|| Communicator::over(mesh.subset(&peers)));
        // Every host must take the same way: one without shared memory keeps
        // them all on the leaders' (each cross communicator spans every host).
        let sharded = match cross.as_mut().filter(|_| equal) {
            Some(cross) => {
                let mut able = [i32::from(local.uses_shared_memory())];
                cross.allreduce(&mut able, ReduceOp::Min)?;
                able[0] == 1
            }
            None => false,
        };
        Ok(Some(Hierarchy {
            local,
            cross,
            sharded,
            size: hosts.len(),
        }))
    }

    /// Allreduce in three steps: within the host, across hosts, back
    /// within the host; sharded for large messages where the hosts allow.
    pub(crate) fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        if self.sharded && std::mem::size_of_val(data) >= SHARDED_FROM {
            self.allreduce_sharded(data, op)
        } else {
            self.allreduce_through_leaders(data, op)
        }
    }

    fn allreduce_sharded<T: Element>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let step = if op == ReduceOp::Average {
            ReduceOp::Sum
        } else {
            op
        };
        self.local.reduce_scatter_shards(data, step)?;
        let shard = segment(data.len(), self.local.size(), self.local.rank());
        let mine = &mut data[shard];
        if let Some(cross) = &mut self.cross {
            cross.allreduce(mine, step)?;
        }
        if op == ReduceOp::Average {
            T::divide(mine, self.size);
        }
        self.local.allgather_shards(data)
    }

    fn allreduce_through_leaders<T: Element>(
        &mut self,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let summing = matches!(op, ReduceOp::Sum | ReduceOp::Average);
        let step = if summing { ReduceOp::Sum } else { op };
        self.local.allreduce(data, step)?;
        if let Some(cross) = self.cross.as_mut().filter(|_| self.local.rank() == 0) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_group_by_host_in_order_of_their_lowest_rank() {
        let hosts: Vec<String> = ["b", "a", "b", "c", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(groups(&hosts), vec![vec![0, 2], vec![1, 4], vec![3]]);
    }
}
