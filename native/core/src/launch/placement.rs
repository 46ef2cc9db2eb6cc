//! Where a rank sits among the ranks of its job, from their hosts:
//! Horovod's local and cross ranks.

/// A rank's local rank and size (among the ranks of its host) and cross
/// rank and size (among the ranks of every host with its local rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// How many ranks before this one share its host.
    pub local_rank: usize,
    /// How many ranks share its host.
    pub local_size: usize,
    /// How many ranks before this one have its local rank.
    pub cross_rank: usize,
    /// How many ranks have its local rank: the hosts with that many ranks.
    pub cross_size: usize,
}

impl Placement {
    /// The placement of `rank` among ranks on `hosts` (rank r on
    /// `hosts[r]`).
    pub fn of(rank: usize, hosts: &[String]) -> Placement {
        let local_rank_of = |r: usize| hosts[..r].iter().filter(|h| **h == hosts[r]).count();
        let local_rank = local_rank_of(rank);
        let same_local_rank: Vec<usize> = (0..hosts.len())
            .filter(|&r| local_rank_of(r) == local_rank)
            .collect();
        Placement {
            local_rank,
            local_size: hosts.iter().filter(|h| **h == hosts[rank]).count(),
            cross_rank: same_local_rank.iter().take_while(|&&r| r < rank).count(),
            cross_size: same_local_rank.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_placed_by_host_in_rank_order() {
        let hosts: Vec<String> = ["a", "b", "a", "a", "b", "[::1]"]
            .iter()
            .map(|h| h.to_string())
            .collect();
        let placements: Vec<(usize, usize, usize, usize)> = (0..hosts.len())
            .map(|rank| {
                let p = Placement::of(rank, &hosts);
                (p.local_rank, p.local_size, p.cross_rank, p.cross_size)
            })
            .collect();
        assert_eq!(
            placements,
            [
                (0, 3, 0, 3),
                (0, 2, 1, 3),
                (1, 3, 0, 2),
                (2, 3, 0, 1),
                (1, 2, 1, 2),
                (0, 1, 2, 3)
            ]
        );
    }
}
