//! How a process becomes a rank: one [`RankSpec`] says everything a rank
//! needs, and [`join`] turns it into a running [`Engine`].
//!
//! Every edge that starts ranks (the JVM plugin, the Python package, the
//! `horovodrs` launcher) builds a `RankSpec` and calls `join`; none of them
//! sequences listen, exchange, connect and engine itself. Users' settings
//! reach the spec through one table ([`settings`]): a driver reads Spark
//! conf keys and Horovod's variables into the spec fields it sends
//! ([`job_settings`]), a rank fills the fields its JSON leaves out from
//! Horovod's variables in its own environment; defaults are declared here
//! and in [`EngineConfig`], once. [`failure`] holds the words by which a
//! driver tells a lost rank, and an error that only follows another rank's.
//!
//! The secret is not part of the spec: it travels as bytes beside it, so it
//! never sits in a JSON string (on the JVM, an immutable `String`) or a log.

pub mod failure;
mod formats;
mod placement;
pub mod settings;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::communicator::Communicator;
use crate::config::{CommConfig, TransportPolicy};
use crate::engine::{Engine, EngineConfig};
use crate::error::{Error, Result};
use crate::hosts::{self, HOSTNAME_VARIABLE};
use crate::rendezvous::{connect, Listener};
use crate::rendezvous_service::exchange_entries;

pub use placement::Placement;
pub use settings::{job_settings, DriverRendezvous, DriverSettings, JobSettings};

/// Where a listener binds when `join` opens it: every interface, any port.
const BIND_ADDRESS: &str = "0.0.0.0:0";

/// Marks an exchanged entry that carries a rank's error instead of its
/// address: a rank that cannot listen, or whose spec is bad, still takes
/// part in the exchange, so the others fail at once naming it instead of
/// waiting for their timeout.
pub const FAILED_ENTRY_PREFIX: &str = "!";

/// Everything one rank needs to join its job, but the secret.
///
/// In JSON only `rank`, `size` and `rendezvous` are required; see
/// [`RankSpec::from_json`] for how the rest is filled in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankSpec {
    /// This rank, below `size`.
    pub rank: usize,
    /// How many ranks the job has.
    pub size: usize,
    /// How this rank learns every rank's address.
    pub rendezvous: Rendezvous,
    /// How long joining may take in total: the address exchange, then
    /// connecting and authenticating every link (default 120 s).
    #[serde(
        rename = "connect_timeout_ms",
        with = "crate::millis",
        default = "default_connect_timeout"
    )]
    pub connect_timeout: Duration,
    /// How long a collective may wait on a silent peer before it fails
    /// naming that rank (default 600 s).
    #[serde(
        rename = "collective_timeout_ms",
        with = "crate::millis",
        default = "default_collective_timeout"
    )]
    pub collective_timeout: Duration,
    /// Whether ranks on several hosts run the hierarchical allreduce
    /// (Horovod's `HOROVOD_HIERARCHICAL_ALLREDUCE`; default on).
    #[serde(default = "default_hierarchical_allreduce")]
    pub hierarchical_allreduce: bool,
    /// Whether links are encrypted (TLS 1.3; `HOROVOD_RS_TLS`, default off).
    #[serde(default)]
    pub tls: bool,
    /// This rank's host when not the host of its address (Horovod's
    /// `HOROVOD_HOSTNAME`, read from the rank's own environment: a driver
    /// never sets it for all ranks). Ranks of one host share memory and
    /// count in its local ranks; ranks of different hosts talk TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The engine's knobs.
    #[serde(default)]
    pub engine: EngineConfig,
}

/// How a rank learns every rank's `host:port`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Rendezvous {
    /// Through the driver's rendezvous service at `address`: `join` opens a
    /// listener and registers `host:<its port>` for stage attempt `attempt`.
    Service {
        /// The service's `host:port`.
        address: String,
        /// The name or address other ranks reach this rank's host by.
        host: String,
        /// The attempt of the job this rank belongs to; the service never
        /// mixes ranks of two attempts.
        #[serde(default)]
        attempt: u32,
    },
    /// Already exchanged by the caller (Spark's barrier `allGather`, a parent
    /// job's engine): rank r listens at `entries[r]`, this rank on the
    /// listener it passes to `join`.
    Entries(Vec<String>),
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(120)
}

fn default_collective_timeout() -> Duration {
    Duration::from_secs(600)
}

fn default_hierarchical_allreduce() -> bool {
    true
}

impl RankSpec {
    /// The spec in `json`, its missing fields filled from Horovod's
    /// variables as `variable` looks them up ([`settings`]), then from
    /// the defaults. A field in the JSON wins over a variable: an edge that
    /// sets it (a driver, through [`job_settings`]) has read the user's choice already.
    ///
    /// # Errors
    /// `InvalidArgument` naming the bad field or variable.
    pub fn from_json(json: &str, variable: impl Fn(&str) -> Option<String>) -> Result<RankSpec> {
        let mut value: serde_json::Value = serde_json::from_str(json).map_err(invalid_spec)?;
        settings::fill_missing(&mut value, &variable)?;
        fill_hostname(&mut value, variable(HOSTNAME_VARIABLE))?;
        let spec: RankSpec = serde_json::from_value(value).map_err(invalid_spec)?;
        spec.checked()
    }

    fn checked(self) -> Result<RankSpec> {
        if let Some(why) = self.hostname.as_deref().and_then(hosts::refusal) {
            return Err(Error::InvalidArgument(format!(
                "rank spec: hostname: {why}"
            )));
        }
        if self.size == 0 || self.rank >= self.size {
            return Err(Error::InvalidArgument(format!(
                "rank {} is out of range for a job of {} ranks",
                self.rank, self.size
            )));
        }
        if let Rendezvous::Entries(entries) = &self.rendezvous {
            if entries.len() != self.size {
                return Err(Error::InvalidArgument(format!(
                    "{} addresses given for a job of {} ranks",
                    entries.len(),
                    self.size
                )));
            }
        }
        Ok(self)
    }

    /// Registers `entry` as this rank's with the driver's service at
    /// `address`; returns every rank's entry.
    fn exchange(
        &self,
        address: &str,
        attempt: u32,
        secret: &[u8],
        entry: &str,
    ) -> Result<Vec<String>> {
        exchange_entries(
            address,
            secret,
            self.rank,
            self.size,
            attempt,
            entry,
            self.connect_timeout,
        )
    }

    fn comm_config(&self) -> CommConfig {
        CommConfig {
            connect_timeout: self.connect_timeout,
            io_timeout: self.collective_timeout,
            transport: if self.hierarchical_allreduce {
                TransportPolicy::Auto
            } else {
                TransportPolicy::Flat
            },
            tls: self.tls,
            hostname: self.hostname.clone(),
        }
    }
}

/// `HOROVOD_HOSTNAME`'s `value` as the spec's `hostname` when the spec has
/// none; refused with the variable's name when it cannot name a host.
fn fill_hostname(spec: &mut serde_json::Value, value: Option<String>) -> Result<()> {
    let (Some(fields), Some(value)) = (spec.as_object_mut(), value) else {
        return Ok(());
    };
    if fields.contains_key("hostname") {
        return Ok(());
    }
    if let Some(why) = hosts::refusal(&value) {
        return Err(Error::InvalidArgument(format!(
            "{HOSTNAME_VARIABLE}: {why}"
        )));
    }
    fields.insert("hostname".into(), value.into());
    Ok(())
}

fn invalid_spec(error: serde_json::Error) -> Error {
    Error::InvalidArgument(format!("rank spec: {error}"))
}

/// A rank that joined its job: its engine, and where it sits among the
/// ranks.
pub struct Joined {
    /// The engine running this rank's collectives.
    pub engine: Engine,
    /// Local and cross rank and size, from the hosts of every rank.
    pub placement: Placement,
    /// The spec it joined with.
    pub spec: RankSpec,
    /// Whether its collectives go through shared memory: every rank is on
    /// its host.
    pub shared_memory: bool,
    /// Whether its allreduce is hierarchical: within each host, then
    /// across hosts over TCP.
    pub hierarchical: bool,
}

/// Joins the job `spec` describes with `secret`: listen, exchange addresses,
/// connect to and authenticate every rank, start the engine.
///
/// `listener` is this rank's, bound by the caller when it exchanged the
/// addresses itself ([`Rendezvous::Entries`], required there); with
/// [`Rendezvous::Service`] `join` binds one when given none.
///
/// # Errors
/// What [`exchange_entries`], [`connect`] and [`Engine::start`] return; and
/// `InvalidArgument` when an exchanged entry says its rank could not listen
/// (naming that rank and its error) or an entries spec comes without a
/// listener.
pub fn join(spec: &RankSpec, secret: &[u8], listener: Option<Listener>) -> Result<Joined> {
    let (listener, entries) = match &spec.rendezvous {
        Rendezvous::Service {
            address,
            host,
            attempt,
        } => {
            let (listener, entry) = match listener.map_or_else(|| Listener::bind(BIND_ADDRESS), Ok)
            {
                Ok(listener) => {
                    let entry = format!("{host}:{}", listener.port());
                    (Ok(listener), entry)
                }
                Err(error) => {
                    let entry = format!(
                        "{FAILED_ENTRY_PREFIX}could not start its rendezvous listener: {error}"
                    );
                    (Err(error), entry)
                }
            };
            let entries = spec.exchange(address, *attempt, secret, &entry)?;
            (listener?, entries)
        }
        Rendezvous::Entries(entries) => {
            let listener = listener.ok_or_else(|| {
                Error::InvalidArgument(
                    "a rank given its peers' addresses must pass the listener it exchanged".into(),
                )
            })?;
            (listener, entries.clone())
        }
    };
    check_every_rank_listens(&entries)?;
    let communicator: Communicator =
        connect(listener, spec.rank, &entries, secret, &spec.comm_config())?;
    let placement = Placement::of(spec.rank, communicator.hosts());
    let (shared_memory, hierarchical) = (
        communicator.uses_shared_memory(),
        communicator.is_hierarchical(),
    );
    let engine = Engine::start(communicator, spec.engine.clone())?;
    Ok(Joined {
        engine,
        placement,
        spec: spec.clone(),
        shared_memory,
        hierarchical,
    })
}

/// [`join`] with the spec in `json`, its missing fields filled from the
/// variables `variable` looks up ([`RankSpec::from_json`]): what the edges
/// call. A rank whose spec is bad (a variable's value, say) still takes part
/// in the driver's exchange when its spec names one, with its error in place
/// of its address, so the other ranks fail at once naming it.
///
/// # Errors
/// As [`RankSpec::from_json`] and [`join`].
pub fn join_json(
    json: &str,
    variable: impl Fn(&str) -> Option<String>,
    secret: &[u8],
    listener: Option<Listener>,
) -> Result<Joined> {
    let error = match RankSpec::from_json(json, variable) {
        Ok(spec) => return join(&spec, secret, listener),
        Err(error) => error,
    };
    if let Ok(spec) = RankSpec::from_json(json, |_| None) {
        if let Rendezvous::Service {
            address, attempt, ..
        } = &spec.rendezvous
        {
            let entry = format!("{FAILED_ENTRY_PREFIX}{error}");
            // This rank fails with its own error whatever the exchange does.
            let _ = spec.exchange(address, *attempt, secret, &entry);
        }
    }
    Err(error)
}

fn check_every_rank_listens(entries: &[String]) -> Result<()> {
    match entries
        .iter()
        .enumerate()
        .find_map(|(rank, entry)| Some((rank, entry.strip_prefix(FAILED_ENTRY_PREFIX)?)))
    {
        Some((rank, error)) => Err(Error::InvalidArgument(format!(
            "rank {rank} could not join: {error}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_variables(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_minimal_spec_takes_the_defaults() {
        let spec = RankSpec::from_json(
            r#"{"rank": 1, "size": 2, "rendezvous": {"service": {"address": "d:1", "host": "h"}}}"#,
            no_variables,
        )
        .unwrap();
        assert_eq!(
            spec,
            RankSpec {
                rank: 1,
                size: 2,
                rendezvous: Rendezvous::Service {
                    address: "d:1".into(),
                    host: "h".into(),
                    attempt: 0
                },
                connect_timeout: Duration::from_secs(120),
                collective_timeout: Duration::from_secs(600),
                hierarchical_allreduce: true,
                tls: false,
                hostname: None,
                engine: EngineConfig {
                    // Unless set, the stall check fails a tensor before a collective times out.
                    stall_timeout: Duration::from_secs(480),
                    ..EngineConfig::default()
                },
            }
        );
        assert_eq!(spec.comm_config().transport, TransportPolicy::Auto);
    }

    #[test]
    fn bad_specs_are_named() {
        let error = |json: &str| {
            RankSpec::from_json(json, no_variables)
                .unwrap_err()
                .to_string()
        };
        assert!(
            error(r#"{"rank": 2, "size": 2, "rendezvous": {"entries": ["a:1", "b:1"]}}"#)
                .contains("rank 2 is out of range for a job of 2 ranks")
        );
        assert!(
            error(r#"{"rank": 0, "size": 2, "rendezvous": {"entries": ["a:1"]}}"#)
                .contains("1 addresses given for a job of 2 ranks")
        );
        assert!(error(
            r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]}, "tls": "yes"}"#
        )
        .contains("rank spec: invalid type"));
        assert!(error(
            r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]}, "timeout": 1}"#
        )
        .contains("unknown field `timeout`"));
        assert!(error("[1]").contains("rank spec"));
    }

    #[test]
    fn horovod_hostname_names_the_rank_s_host_unless_the_spec_does() {
        let spec = |json: &str, hostname: &str| {
            let hostname = hostname.to_string();
            RankSpec::from_json(json, move |name| {
                (name == HOSTNAME_VARIABLE).then(|| hostname.clone())
            })
        };
        let minimal = r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]}}"#;
        assert_eq!(
            spec(minimal, "node-2").unwrap().hostname.as_deref(),
            Some("node-2")
        );
        assert_eq!(
            RankSpec::from_json(minimal, no_variables).unwrap().hostname,
            None
        );
        let given =
            r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]}, "hostname": "x"}"#;
        assert_eq!(
            spec(given, "node-2").unwrap().hostname.as_deref(),
            Some("x")
        );
        assert_eq!(
            spec(minimal, "").unwrap_err().to_string(),
            "invalid argument: HOROVOD_HOSTNAME: a host name cannot be empty"
        );
        let spaced =
            r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]}, "hostname": "a b"}"#;
        assert!(spec(spaced, "node-2")
            .unwrap_err()
            .to_string()
            .contains("rank spec: hostname: a host name has no spaces"));
    }

    #[test]
    fn an_entry_of_a_rank_that_could_not_listen_names_it() {
        let entries = ["a:1".to_string(), "!its listener failed".to_string()];
        assert_eq!(
            check_every_rank_listens(&entries).unwrap_err().to_string(),
            "invalid argument: rank 1 could not join: its listener failed"
        );
        assert!(check_every_rank_listens(&entries[..1]).is_ok());
    }
}
