//! Errors of horovod-core.
//!
//! Every failure a caller can see is one [`Error`] variant whose message names
//! what failed and, where one is involved, which rank. The JVM tells a
//! root-cause failure from its consequences with [`Error::is_peer_lost`]: a
//! rank that fails for its own reason closes its connections, so its peers see
//! `PeerLost` naming it.

use std::io;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Result of every fallible operation of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in rendezvous or in a collective.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call failed for a reason other than a lost peer or
    /// a timeout: binding the listener, setting a socket option, spawning a
    /// thread, an unexpected socket error.
    #[error("{context}: {source}")]
    Io {
        /// What this rank was doing.
        context: String,
        /// The underlying error.
        source: io::Error,
    },

    /// The connection to `rank` was closed or reset while this rank was using
    /// it: that peer died, dropped its communicator, or gave up after an error
    /// of its own.
    #[error("connection to rank {rank} lost {context}")]
    PeerLost {
        /// The peer whose connection was lost.
        rank: usize,
        /// When it was lost, e.g. "during allreduce: the peer closed the connection".
        context: String,
    },

    /// Nothing arrived within the configured time: a peer did not connect
    /// within `connect_timeout`, or did not send or accept data within
    /// `io_timeout`.
    #[error("timed out {what}")]
    Timeout {
        /// What was awaited, e.g. "after 5s waiting for rank 2 to connect".
        what: String,
        /// The peer that was awaited, when there is one.
        rank: Option<usize>,
    },

    /// A peer this rank connected to could not prove it knows the job secret
    /// (or the ranks were given different secrets).
    #[error("authentication failed: {detail}")]
    AuthFailed {
        /// Which peer, and what it failed to prove.
        detail: String,
    },

    /// A peer speaks another wire-protocol version (another build of
    /// horovod-rs), is not a horovod-rs listener at all, or is the other kind
    /// of endpoint: the driver's rendezvous service where a rank's listener
    /// was expected, or the reverse.
    #[error("protocol mismatch with {peer}: {detail}")]
    VersionMismatch {
        /// The peer, e.g. "rank 0 at 10.0.0.1:4000".
        peer: String,
        /// The versions involved.
        detail: String,
    },

    /// An authenticated peer disagrees with this rank about the job: its size,
    /// its byte order, its own rank, or which collective is being run (another
    /// operation, element type or length).
    #[error("rank {rank} disagrees with this rank: {detail}")]
    Mismatch {
        /// The disagreeing peer.
        rank: usize,
        /// What differs.
        detail: String,
    },

    /// The connection to the driver's rendezvous service was closed or reset
    /// before it sent every rank's entry: the driver stopped the service (it
    /// gave up on the job), or this rank registered again on another
    /// connection.
    #[error("connection to the driver's rendezvous service at {address} lost {context}")]
    ServiceLost {
        /// The service's "host:port".
        address: String,
        /// When it was lost, e.g. "while waiting for the other ranks to
        /// register: the service closed the connection".
        context: String,
    },

    /// An argument is unusable: rank out of range, empty address list,
    /// unparsable address, empty secret, zero timeout, an entry too long for
    /// the rendezvous service; or the service refused this rank's arguments
    /// (it runs a job of another size).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The communicator was used after a collective failed on it; its
    /// connections are closed and the job has to rendezvous again.
    #[error("communicator is unusable after an earlier failure: {cause}")]
    Unusable {
        /// The message of the failure that broke the communicator.
        cause: String,
    },

    /// Ranks submitted the same tensor name to the engine with different
    /// collectives, element types or shapes; every rank's handle for it
    /// fails with this error.
    #[error("tensor '{name}' was submitted differently across ranks: {detail}")]
    TensorMismatch {
        /// The tensor.
        name: String,
        /// What differs, on which ranks.
        detail: String,
    },

    /// A tensor was submitted to the engine by some ranks but not by
    /// `missing` within the engine's stall timeout; the ranks that submitted
    /// it fail it with this error.
    #[error("tensor '{name}' stalled: ranks {missing:?} did not submit it within {waited:?}")]
    Stalled {
        /// The tensor.
        name: String,
        /// Ranks that never submitted it.
        missing: Vec<usize>,
        /// How long the first rank that submitted it had waited.
        waited: Duration,
    },

    /// A tensor name was submitted to the engine while an earlier
    /// submission of the same name on this rank was still in flight.
    #[error("tensor '{name}' is already in flight on this rank")]
    DuplicateName {
        /// The tensor.
        name: String,
    },

    /// The engine's background thread has stopped: it was shut down (on this
    /// or another rank) or its transport failed; `cause` says which.
    #[error("the engine has stopped: {cause}")]
    EngineStopped {
        /// Why it stopped.
        cause: String,
    },

    /// The transport the engine runs on cannot execute this collective or
    /// element type (yet); every rank fails the tensor the same way.
    #[error("not supported by this transport: {what}")]
    Unsupported {
        /// The collective and element type.
        what: String,
    },

    /// A control message of the engine could not be decoded: a rank runs
    /// another build, or the bytes were corrupted.
    #[error("malformed control message: {detail}")]
    ControlMessage {
        /// Which message, and what is wrong with it.
        detail: String,
    },

    /// GPU collectives (NCCL) were requested from a build of horovod-core
    /// without the `cuda` feature.
    #[error(
        "this build of horovod-rs has no CUDA support: GPU collectives (NCCL) need \
         horovod-core built with the `cuda` feature"
    )]
    NoCudaSupport,

    /// An NCCL communicator could not be created because this host, or
    /// another rank's, lacks what GPU collectives need: the CUDA driver
    /// library, a CUDA device with the requested ordinal, or a loadable NCCL
    /// library of a supported version.
    #[error("NCCL unavailable: {reason}")]
    NcclUnavailable {
        /// What is missing, on which rank, and what to install.
        reason: String,
    },

    /// A CUDA driver or NCCL call failed while creating or using an NCCL
    /// communicator (a peer died, a bad device pointer, an internal NCCL
    /// error); the communicator is unusable afterwards.
    #[error("NCCL {during} failed: {detail}")]
    Nccl {
        /// The call, e.g. "allreduce of 1024 f32 (SUM)".
        during: String,
        /// NCCL's or the driver's description of the failure.
        detail: String,
    },
}

impl Error {
    /// True when this error is a lost connection to a peer, which is usually
    /// the consequence of a failure on that peer rather than a root cause.
    pub fn is_peer_lost(&self) -> bool {
        matches!(self, Error::PeerLost { .. })
    }

    /// A copy of this error, for delivering one failure to several waiters
    /// (an I/O error keeps its kind and message).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Error::PeerLost { rank, context } => Error::PeerLost {
                rank: *rank,
                context: context.clone(),
            },
            Error::Timeout { what, rank } => Error::Timeout {
                what: what.clone(),
                rank: *rank,
            },
            Error::AuthFailed { detail } => Error::AuthFailed {
                detail: detail.clone(),
            },
            Error::VersionMismatch { peer, detail } => Error::VersionMismatch {
                peer: peer.clone(),
                detail: detail.clone(),
            },
            Error::Mismatch { rank, detail } => Error::Mismatch {
                rank: *rank,
                detail: detail.clone(),
            },
            Error::ServiceLost { address, context } => Error::ServiceLost {
                address: address.clone(),
                context: context.clone(),
            },
            Error::InvalidArgument(detail) => Error::InvalidArgument(detail.clone()),
            Error::Unusable { cause } => Error::Unusable {
                cause: cause.clone(),
            },
            Error::TensorMismatch { name, detail } => Error::TensorMismatch {
                name: name.clone(),
                detail: detail.clone(),
            },
            Error::Stalled {
                name,
                missing,
                waited,
            } => Error::Stalled {
                name: name.clone(),
                missing: missing.clone(),
                waited: *waited,
            },
            Error::DuplicateName { name } => Error::DuplicateName { name: name.clone() },
            Error::EngineStopped { cause } => Error::EngineStopped {
                cause: cause.clone(),
            },
            Error::Unsupported { what } => Error::Unsupported { what: what.clone() },
            Error::ControlMessage { detail } => Error::ControlMessage {
                detail: detail.clone(),
            },
            Error::NoCudaSupport => Error::NoCudaSupport,
            Error::NcclUnavailable { reason } => Error::NcclUnavailable {
                reason: reason.clone(),
            },
            Error::Nccl { during, detail } => Error::Nccl {
                during: during.clone(),
                detail: detail.clone(),
            },
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Keeps the first error reported by any of several threads working on one
/// operation: later errors are usually consequences of the first (a thread
/// shutting a socket down to wake another).
#[derive(Debug, Default)]
pub(crate) struct FirstError(Mutex<Option<Error>>);

impl FirstError {
    /// Records `error` unless an earlier one is already recorded.
    pub(crate) fn record(&self, error: Error) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    /// The recorded error as a result.
    pub(crate) fn into_result(self) -> Result<()> {
        match self.0.into_inner().unwrap_or_else(PoisonError::into_inner) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_rank() {
        let lost = Error::PeerLost {
            rank: 1,
            context: "during allreduce: the peer closed the connection".into(),
        };
        assert_eq!(
            lost.to_string(),
            "connection to rank 1 lost during allreduce: the peer closed the connection"
        );
        assert!(lost.is_peer_lost());
        let timeout = Error::Timeout {
            what: "after 5s waiting for rank 2 to connect".into(),
            rank: Some(2),
        };
        assert_eq!(
            timeout.to_string(),
            "timed out after 5s waiting for rank 2 to connect"
        );
        assert!(!timeout.is_peer_lost());
    }

    #[test]
    fn first_error_wins() {
        let first = FirstError::default();
        first.record(Error::InvalidArgument("one".into()));
        first.record(Error::InvalidArgument("two".into()));
        let err = first.into_result().unwrap_err();
        assert_eq!(err.to_string(), "invalid argument: one");
    }
}
