//! How a communicator is set up: its timeouts, which transport its
//! collectives take, and whether its links are encrypted.

use std::time::Duration;

/// Which transport the collectives of a communicator use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TransportPolicy {
    /// Shared memory when every rank is on this host (all ranks have the
    /// same host, `crate::hosts`), TCP otherwise.
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
    pub transport: TransportPolicy,
    /// Whether the links are encrypted (TLS 1.3, `HOROVOD_RS_TLS`);
    /// every rank must be given the same.
    pub tls: bool,
    /// This rank's host (Horovod's `HOROVOD_HOSTNAME`), when not the host
    /// part of its address: ranks with one host share memory, others talk
    /// TCP even when their addresses are equal.
    pub hostname: Option<String>,
}

impl Default for CommConfig {
    /// 120 s to connect, 600 s per read or write, [`TransportPolicy::Auto`],
    /// not encrypted, the host of the rank's address.
    fn default() -> Self {
        CommConfig {
            connect_timeout: Duration::from_secs(120),
            io_timeout: Duration::from_secs(600),
            transport: TransportPolicy::Auto,
            tls: false,
            hostname: None,
        }
    }
}
