//! Opening a link when a collective first needs it: dial the peer's
//! listener, prove the job's secret, and either have the link or learn that
//! the peer's own dial, crossing this one, wins ([`super::pairs`]).
//!
//! Until the job has joined, a peer may still be starting: a dial retries
//! until the join's deadline. Afterwards every rank's listener is up until
//! its communicator closes, so a refused dial means the peer is gone.

use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use log::debug;

use super::accept::Acceptor;
use super::job::{prepare, remaining, Job};
use super::pairs::{Claim, Pairs};
use crate::error::{Error, Result};
use crate::handshake::{self, Dialled};
use crate::link::{io_error, Link};
use crate::net::{open, MAX_CONNECT_ATTEMPT, MAX_RETRY_PAUSE};
use crate::wire::{ACK, DECLINE, KIND_RANK};

const DURING: &str = "the rendezvous handshake";

/// How long a failed dial waits for the acceptor's handshakes in hand, which
/// may explain the failure or make it moot.
const SETTLE: Duration = Duration::from_secs(2);

/// This rank's way to every peer's listener, and its own listener's
/// acceptor.
pub(crate) struct Dialler {
    /// Every rank's "host:port".
    addresses: Vec<String>,
    job: Arc<Job>,
    pairs: Arc<Pairs>,
    /// The deadline of every dial until the job has joined; `None` after.
    join_deadline: Mutex<Option<Instant>>,
    acceptor: Acceptor,
}

impl Dialler {
    /// Starts taking the peers' dials on `listener`; dials made before
    /// [`Dialler::joined`] may take until the connect timeout from now.
    pub(crate) fn start(
        listener: TcpListener,
        addresses: Vec<String>,
        job: Job,
    ) -> Result<Dialler> {
        let join_deadline = Instant::now() + job.connect_timeout;
        let job = Arc::new(job);
        let pairs = Arc::new(Pairs::new(job.rank, job.size));
        let acceptor = Acceptor::start(listener, Arc::clone(&job), Arc::clone(&pairs))?;
        Ok(Dialler {
            addresses,
            job,
            pairs,
            join_deadline: Mutex::new(Some(join_deadline)),
            acceptor,
        })
    }

    /// The link to `peer`: the one it opened, or a new one this rank dials.
    pub(crate) fn open(&self, peer: usize) -> Result<Link> {
        let joining = *self
            .join_deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let deadline = joining.unwrap_or_else(|| Instant::now() + self.job.connect_timeout);
        loop {
            match self.pairs.claim(peer, deadline)? {
                Claim::Ready(link) => return Ok(self.pairs.fitted(link)),
                Claim::Dial => {}
            }
            let superseded = || self.pairs.superseded(peer);
            let outcome = dial(
                &self.job,
                peer,
                &self.addresses[peer],
                deadline,
                joining.is_some(),
                superseded,
            );
            self.pairs.dialled(peer, &outcome);
            match outcome {
                Ok(Some(link)) => return Ok(self.pairs.fitted(link)),
                // Declined: the claim waits for the peer's dial.
                Ok(None) => {}
                Err(error) => {
                    self.pairs.settle(SETTLE);
                    // The peer's own dial came in: the claim takes it (the
                    // peer may have closed this one after it was done).
                    if !self.pairs.superseded(peer) {
                        return Err(self.pairs.explain(error));
                    }
                }
            }
        }
    }

    /// The job has joined: from now on each dial gets the connect timeout
    /// of its own, and a refused one is final.
    pub(crate) fn joined(&self) {
        *self
            .join_deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Links made from now on poll before they sleep.
    pub(crate) fn poll_busily(&self) {
        self.pairs.poll_busily();
    }

    /// No more links, either way.
    pub(crate) fn close(&self) {
        self.pairs.close();
        self.acceptor.stop();
    }
}

impl std::fmt::Debug for Dialler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialler")
            .field("rank", &self.job.rank)
            .field("size", &self.job.size)
            .finish_non_exhaustive()
    }
}

/// Dials `peer` at `address`: `Some(link)` once it admitted this rank,
/// `None` if it declined (its own dial to this rank wins) or, while its
/// listener did not answer, its dial to this rank came in (`superseded`).
fn dial(
    job: &Job,
    peer: usize,
    address: &str,
    deadline: Instant,
    joining: bool,
    superseded: impl Fn() -> bool,
) -> Result<Option<Link>> {
    let mut pause = Duration::from_millis(10);
    let stream = loop {
        if superseded() {
            return Ok(None);
        }
        let failure = match open(address, remaining(deadline).min(MAX_CONNECT_ATTEMPT)) {
            Ok(stream) => break stream,
            Err(e) => e,
        };
        if !joining && failure.kind() == io::ErrorKind::ConnectionRefused {
            return Err(Error::PeerLost {
                rank: peer,
                context: format!(
                    "before it was opened: rank {peer} at {address} refused the connection \
                     (its listener has closed: the rank ended or gave up)"
                ),
            });
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!(
                    "after {:?} trying to connect to rank {peer} at {address} (last error: {failure})",
                    job.connect_timeout
                ),
                rank: Some(peer),
            });
        }
        debug!(
            "rank {}: rank {peer} at {address} not reachable yet: {failure}",
            job.rank
        );
        thread::sleep(pause.min(remaining(deadline)));
        pause = (pause * 2).min(MAX_RETRY_PAUSE);
    };
    if !handshake_as_connector(&stream, peer, address, job, deadline)? {
        return Ok(None);
    }
    debug!("rank {}: authenticated rank {peer} at {address}", job.rank);
    // The TLS handshake, if any, within the dial's deadline too.
    let mut link = Link::new(peer, stream, remaining(deadline))?;
    if let Some(credentials) = &job.credentials {
        link = link.encrypt(credentials, false)?;
    }
    link.with_io_timeout(job.io_timeout).map(Some)
}

/// The connector's side of the handshake with rank `peer`: true once the
/// peer admitted this rank, false if it declined.
fn handshake_as_connector(
    stream: &TcpStream,
    peer: usize,
    address: &str,
    job: &Job,
    deadline: Instant,
) -> Result<bool> {
    let io = |e: io::Error| io_error(e, peer, DURING, job.connect_timeout);
    let dialled = Dialled {
        name: format!("rank {peer} at {address}"),
        kind: KIND_RANK,
        secret_holders: "the ranks",
    };
    prepare(stream, deadline)
        .map_err(|e| Error::io(format!("configuring the connection to {}", dialled.name), e))?;
    let mut stream = stream;

    let hello = handshake::connect(stream, &job.secret, &job.hello()?, &dialled, io)?;
    job.check_peer(&hello, Some(peer))?;

    // Step 4: the acceptor admits this rank, or declines it.
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => Error::PeerLost {
            rank: peer,
            context: format!(
                "during {DURING}: it closed the connection instead of accepting this rank"
            ),
        },
        _ => io(e),
    })?;
    match answer[0] {
        ACK => Ok(true),
        DECLINE => Ok(false),
        other => Err(Error::VersionMismatch {
            peer: dialled.name,
            detail: format!("it ended the handshake with byte {other:#04x}"),
        }),
    }
}
