//! A rank's side: registering its entry and receiving everyone's.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use log::debug;

use crate::auth::{self, Secret};
use crate::error::{Error, Result};
use crate::handshake::{self, Dialled};
use crate::net::{self, MAX_CONNECT_ATTEMPT, MAX_TIMEOUT};
use crate::wire::{Hello, KIND_SERVICE, KIND_SERVICE_CLIENT};

use super::frames::*;

/// Longest pause between attempts to reach a service not listening yet.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The same between rounds over candidates: rank 0's task, which hosts the
/// service there, starts about when the others do, so they look often.
const MAX_CANDIDATE_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Longest handshake with one of several candidate addresses: a stranger
/// that listens there and stays silent costs this much a round.
const CANDIDATE_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// Registers `entry` as rank `rank`'s of stage attempt `attempt` with the
/// job's rendezvous service at `service_addr` ("host:port"), and returns
/// every rank's entry of that attempt, in rank order.
///
/// `size` is the job size and must be the service's; `entry` is at most
/// 64 KiB of UTF-8. Connecting is retried (the service may not listen yet)
/// and the whole call takes at most `timeout`.
///
/// `service_addr` may list candidates, comma-separated ("h:p1,h:p2"): the
/// service listens at one of them, and the others may be anyone's (a rank
/// that hosts the service takes the first port it can bind). Each round
/// tries them in order; one that answers but is not the job's service
/// (another protocol, another secret) is skipped from then on, one silent
/// for 2 s only in that round.
///
/// # Errors
/// * `InvalidArgument`: rank out of range, unparsable address, entry too
///   long, empty secret, zero timeout; or the service refused the
///   registration (it runs a job of another size).
/// * `AuthFailed`: the service could not prove it knows the secret.
/// * `VersionMismatch`: the address answers with another protocol version,
///   as a rank's listener, or not as horovod-rs at all.
/// * `Timeout`: the service could not be reached, did not answer the
///   handshake, or not every rank registered within `timeout`.
/// * `ServiceLost`: the service closed the connection first (the driver
///   stopped it), or this rank registered again on another connection.
pub fn exchange_entries(
    service_addr: &str,
    secret: &[u8],
    rank: usize,
    size: usize,
    attempt: u32,
    entry: &str,
    timeout: Duration,
) -> Result<Vec<String>> {
    let secret = Secret::new(secret)?;
    let candidates: Vec<&str> = service_addr.split(',').collect();
    validate(&candidates, rank, size, entry, timeout)?;
    let timeout = timeout.min(MAX_TIMEOUT);
    let client = Client {
        address: service_addr,
        candidates,
        rank,
        size,
        attempt,
        secret,
        timeout,
        deadline: Instant::now() + timeout,
    };
    let (stream, address) = client.reach()?;
    let result = client.register(&stream, address, entry);
    let _ = stream.shutdown(Shutdown::Both);
    if let Ok(entries) = &result {
        debug!(
            "rank {rank}: received the {} entries of stage attempt {attempt}",
            entries.len()
        );
    }
    result
}

fn validate(
    candidates: &[&str],
    rank: usize,
    size: usize,
    entry: &str,
    timeout: Duration,
) -> Result<()> {
    if size == 0 {
        return Err(Error::InvalidArgument("the job size is zero".into()));
    }
    handshake::check_rank(rank, size)?;
    if let Some(address) = candidates.iter().find(|a| !net::is_host_port(a)) {
        return Err(Error::InvalidArgument(format!(
            "the rendezvous service address {address:?} is not host:port"
        )));
    }
    if entry.len() > MAX_ENTRY_LEN {
        return Err(Error::InvalidArgument(format!(
            "the entry of rank {rank} is {} bytes, more than the {MAX_ENTRY_LEN} the rendezvous service accepts",
            entry.len()
        )));
    }
    if timeout.is_zero() {
        return Err(Error::InvalidArgument(
            "the rendezvous timeout must be positive".into(),
        ));
    }
    Ok(())
}

/// What a rank's registration needs to know.
struct Client<'a> {
    address: &'a str,
    candidates: Vec<&'a str>,
    rank: usize,
    size: usize,
    attempt: u32,
    secret: Secret,
    timeout: Duration,
    deadline: Instant,
}

/// What the client is doing, for error messages.
#[derive(Clone, Copy)]
enum Phase {
    Handshake,
    Waiting,
}

impl Client<'_> {
    /// Time left until the deadline, at least 1 ms (a zero socket timeout is
    /// invalid).
    fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    fn service(&self) -> String {
        if self.candidates.len() > 1 {
            format!("rank 0's rendezvous service at one of {}", self.address)
        } else {
            format!("the driver's rendezvous service at {}", self.address)
        }
    }

    /// Connects to the service and takes the handshake, retrying until the
    /// deadline; returns the connection and the candidate it reached.
    fn reach(&self) -> Result<(TcpStream, &str)> {
        let mut pause = Duration::from_millis(5);
        let mut strangers: Vec<Option<Error>> = self.candidates.iter().map(|_| None).collect();
        loop {
            let mut failure = None;
            for (address, stranger) in self.candidates.iter().zip(strangers.iter_mut()) {
                if stranger.is_some() {
                    continue;
                }
                let stream = match net::open(address, self.remaining().min(MAX_CONNECT_ATTEMPT)) {
                    Ok(stream) => stream,
                    Err(e) => {
                        failure = Some(e.to_string());
                        continue;
                    }
                };
                match self.handshake(&stream) {
                    Ok(()) => return Ok((stream, address)),
                    Err(e) if self.candidates.len() > 1 && is_a_stranger(&e) => {
                        debug!(
                            "rank {}: {address} is not the job's rendezvous service: {e}",
                            self.rank
                        );
                        *stranger = Some(e);
                    }
                    // Silence or a dropped connection may be the service under load: next round.
                    Err(e) if self.candidates.len() > 1 && is_unanswered(&e) => {
                        failure = Some(e.to_string());
                    }
                    Err(e) => return Err(e),
                }
            }
            if strangers.iter().all(Option::is_some) {
                let reasons: Vec<String> = self
                    .candidates
                    .iter()
                    .zip(&strangers)
                    .filter_map(|(address, e)| Some(format!("{address}: {}", e.as_ref()?)))
                    .collect();
                return Err(Error::InvalidArgument(format!(
                    "rank {}: none of the candidate addresses of the job's rendezvous service answers as it ({})",
                    self.rank,
                    reasons.join("; ")
                )));
            }
            let failure = failure.unwrap_or_default();
            if Instant::now() >= self.deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "after {:?} trying to reach {} (last error: {failure})",
                        self.timeout,
                        self.service()
                    ),
                    rank: None,
                });
            }
            debug!(
                "rank {}: {} not reachable yet: {failure}",
                self.rank,
                self.service()
            );
            thread::sleep(pause.min(self.remaining()));
            pause = (pause * 2).min(if self.candidates.len() > 1 {
                MAX_CANDIDATE_RETRY_PAUSE
            } else {
                MAX_RETRY_PAUSE
            });
        }
    }

    /// The client's side of the handshake: a candidate's is short, as a
    /// stranger may listen there.
    fn handshake(&self, stream: &TcpStream) -> Result<()> {
        let handshake = |e: io::Error| self.io_error(e, Phase::Handshake);
        let timeout = if self.candidates.len() > 1 {
            self.remaining().min(CANDIDATE_HANDSHAKE_TIMEOUT)
        } else {
            self.remaining()
        };
        prepare(stream, timeout).map_err(|e| {
            Error::io(
                format!("configuring the connection to {}", self.service()),
                e,
            )
        })?;
        // Both fit in u32: `validate` checked the size.
        let ours = Hello::of_kind(
            KIND_SERVICE_CLIENT,
            self.rank as u32,
            self.size as u32,
            auth::nonce()?,
        );
        let dialled = Dialled {
            name: self.service(),
            kind: KIND_SERVICE,
            secret_holders: "the driver and the ranks",
        };
        handshake::connect(stream, &self.secret, &ours, &dialled, handshake).map(|_| ())
    }

    /// The request and the reply, on a connection past its handshake with
    /// the service at `address`.
    fn register(&self, stream: &TcpStream, address: &str, entry: &str) -> Result<Vec<String>> {
        let mut stream = stream;
        stream
            .set_write_timeout(Some(self.remaining()))
            .and_then(|()| stream.write_all(&encode_request(self.attempt, entry)))
            .map_err(|e| self.io_error(e, Phase::Handshake))?;

        stream
            .set_read_timeout(Some(self.remaining()))
            .map_err(|e| self.io_error(e, Phase::Waiting))?;
        let payload = read_frame(&mut stream, max_reply_len(self.size))
            .map_err(|e| self.io_error(e, Phase::Waiting))?;
        match decode_reply(&payload, self.size) {
            Ok(Reply::Entries(entries)) => Ok(entries),
            Ok(Reply::Refused(message)) => Err(Error::InvalidArgument(format!(
                "{} refused the registration of rank {}: {message}",
                self.service(),
                self.rank
            ))),
            Ok(Reply::Superseded(message)) => Err(Error::ServiceLost {
                address: address.to_string(),
                context: format!("while waiting for the other ranks to register: {message}"),
            }),
            Err(detail) => Err(Error::VersionMismatch {
                peer: self.service(),
                detail: format!("malformed reply: {detail}"),
            }),
        }
    }

    /// Maps an I/O error on the connection to the service.
    fn io_error(&self, err: io::Error, phase: Phase) -> Error {
        let during = match phase {
            Phase::Handshake => "during the handshake",
            Phase::Waiting => "while waiting for the other ranks to register",
        };
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout {
                what: match phase {
                    Phase::Handshake => format!(
                        "after {:?} waiting for {} to answer the handshake",
                        self.timeout,
                        self.service()
                    ),
                    Phase::Waiting => format!(
                        "after {:?} waiting for {}: not every rank registered for stage attempt {}",
                        self.timeout,
                        self.service(),
                        self.attempt
                    ),
                },
                rank: None,
            },
            io::ErrorKind::UnexpectedEof => Error::ServiceLost {
                address: self.address.to_string(),
                context: format!(
                    "{during}: the service closed the connection (did the driver stop the job?)"
                ),
            },
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected => Error::ServiceLost {
                address: self.address.to_string(),
                context: format!("{during}: {err}"),
            },
            io::ErrorKind::InvalidData => Error::VersionMismatch {
                peer: self.service(),
                detail: format!("malformed reply: {err}"),
            },
            _ => Error::io(format!("{during} with {}", self.service()), err),
        }
    }
}

/// Whether a handshake's failure says the address is someone else's, not the
/// job's service: another protocol or version, or another secret.
fn is_a_stranger(error: &Error) -> bool {
    matches!(
        error,
        Error::AuthFailed { .. } | Error::VersionMismatch { .. }
    )
}

/// Whether a handshake got no answer (silence, a connection closed or reset):
/// a stranger's, or the service's under load, so the candidate is tried again.
fn is_unanswered(error: &Error) -> bool {
    matches!(
        error,
        Error::Timeout { .. } | Error::ServiceLost { .. } | Error::Io { .. }
    )
}
