//! A job's rendezvous service hosted by rank 0's task, for a job whose driver
//! the executors may not reach (a Spark Connect client): rank 0 starts it on
//! the first port it can bind of [`RANK_ZERO_PORTS`] that every rank derives
//! from the job's secret, and the others register at rank 0's host, trying
//! those ports in order ([`super::exchange_entries`] takes them as
//! candidates and skips one that answers as something else). Rank 0 is
//! reachable wherever the ranks' mesh is, so this needs no port beyond the
//! mesh's; Spark's barrier `allGather`, the alternative, costs a second a job.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

use super::RendezvousService;

/// How many ports rank 0 tries, in the order every rank knows.
pub const RANK_ZERO_PORTS: usize = 8;

/// The ports are drawn from below Linux's ephemeral range (32768-60999),
/// where outgoing connections take theirs.
const PORT_RANGE: std::ops::Range<u16> = 20000..32768;

/// The candidate ports of the job's rank-0 service, in order: the job's own
/// (another job has others). A stage Spark reruns has the same; rank 0
/// closes its service once it joined, so the next attempt finds the first free.
pub fn rank_zero_ports(secret: &[u8]) -> Vec<u16> {
    let span = u32::from(PORT_RANGE.end - PORT_RANGE.start);
    (0..RANK_ZERO_PORTS)
        .map(|i| {
            let digest = Sha256::new()
                .chain_update(secret)
                .chain_update(format!(" rendezvous port {i}"))
                .finalize();
            let value = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
            // The remainder is below `span`, which fits in u16.
            PORT_RANGE.start + (value % span) as u16
        })
        .collect()
}

/// Where a rank registers with rank 0's service on `rank_zero_host`: the
/// candidates, comma-separated, for [`super::exchange_entries`].
pub fn rank_zero_candidates(rank_zero_host: &str, secret: &[u8]) -> String {
    rank_zero_ports(secret)
        .iter()
        .map(|port| format!("{rank_zero_host}:{port}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl RendezvousService {
    /// Rank 0's service for a job of `size` ranks: on the first of the job's
    /// ports ([`rank_zero_ports`]) it can bind, on every interface.
    ///
    /// # Errors
    /// As [`RendezvousService::start`]; `Io` naming every port when none can
    /// be bound.
    pub fn start_for_rank_zero(secret: &[u8], size: usize) -> Result<RendezvousService> {
        let mut failures = Vec::new();
        for port in rank_zero_ports(secret) {
            match RendezvousService::start(&format!("0.0.0.0:{port}"), secret, size) {
                Ok(service) => return Ok(service),
                Err(Error::Io { .. }) => failures.push(port),
                Err(e) => return Err(e),
            }
        }
        Err(Error::io(
            format!(
                "rank 0 starting the job's rendezvous service: none of its ports {failures:?} is free \
                 (spark.horovod.rs.driverRendezvous=true uses the driver's instead)"
            ),
            std::io::Error::from(std::io::ErrorKind::AddrInUse),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_are_the_jobs_own_and_in_range() {
        let ports = rank_zero_ports(b"one job's secret");
        assert_eq!(ports.len(), RANK_ZERO_PORTS);
        assert_eq!(ports, rank_zero_ports(b"one job's secret"));
        assert_ne!(ports, rank_zero_ports(b"another job's secret"));
        assert!(ports.iter().all(|port| PORT_RANGE.contains(port)));
        assert_eq!(
            rank_zero_candidates("h", b"one job's secret"),
            ports
                .iter()
                .map(|p| format!("h:{p}"))
                .collect::<Vec<_>>()
                .join(",")
        );
    }

    #[test]
    fn rank_zero_takes_the_first_free_port() {
        let secret = b"a secret for the rank-0 service test";
        let ports = rank_zero_ports(secret);
        // Someone else listens on the first port (if it is free to take here).
        let taken = std::net::TcpListener::bind(("0.0.0.0", ports[0]));
        let service = RendezvousService::start_for_rank_zero(secret, 2).unwrap();
        if taken.is_ok() {
            assert_eq!(service.port(), ports[1]);
        } else {
            assert!(ports.contains(&service.port()));
        }
    }
}
