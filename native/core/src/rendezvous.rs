//! Rendezvous: turns a listening socket and the list of every rank's address
//! into an authenticated full mesh of TCP connections.
//!
//! Each pair of ranks shares one connection, opened by the higher rank to the
//! lower rank's listener. A rank therefore connects to all lower ranks (in
//! order, retrying until the peer answers) while a second thread accepts the
//! higher ranks; as the lowest rank only accepts, no cycle of waiting ranks
//! can form.
//!
//! Each connection is authenticated by the handshake of [`crate::handshake`]
//! between two ranks of the mesh (kind byte "rank"), so a rank dialling the
//! driver's rendezvous service, or the service's client dialling a rank, is
//! named as such. Its step 4 is the acceptor's ACK. An authenticated peer is
//! then checked against this rank's job: byte order, job size, rank.
//!
//! Invariant: the acceptor handles every incoming connection on its own
//! thread and only ends rendezvous early for an *authenticated* peer that
//! disagrees about the job. A connection that sends garbage, stays silent,
//! speaks another protocol version or cannot prove the secret is logged,
//! dropped, and mentioned if rendezvous later times out, but the listener
//! keeps waiting for the genuine peer.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use log::{debug, warn};

use crate::address::host;
use crate::auth::{self, Secret};
use crate::communicator::Communicator;
use crate::config::CommConfig;
use crate::doorbell::Doorbell;
use crate::error::{Error, FirstError, Result};
use crate::fd_limit;
use crate::handshake::{self, Dialled};
use crate::hosts;
use crate::link::{io_error, Link};
use crate::spin;
use crate::tls::{Credentials, TLS_VARIABLE};
use crate::wire::{self, Hello, ACK, KIND_RANK, NATIVE_ENDIAN};

/// Pause after a failed accept (e.g. out of descriptors) before the next
/// try: the listener stays readable, so waiting on it would not pause.
pub(crate) const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(5);
/// Longest pause between attempts to connect to a peer not listening yet.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Longer timeouts are cut to this, so deadlines cannot overflow.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest single TCP connect attempt.
pub(crate) const MAX_CONNECT_ATTEMPT: Duration = Duration::from_secs(5);

/// This rank's listening socket, bound before the addresses are exchanged.
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    port: u16,
}

impl Listener {
    /// Binds a listener, e.g. on "0.0.0.0:0" (any interface, a free port).
    pub fn bind(addr: &str) -> Result<Listener> {
        let (inner, port) = bind(addr, "a listener")?;
        debug!("listening on {addr}, port {port}");
        Ok(Listener { inner, port })
    }

    /// The port the listener is bound to.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Binds `what` (e.g. "a listener") to `addr`; returns it and its port.
pub(crate) fn bind(addr: &str, what: &str) -> Result<(TcpListener, u16)> {
    let listener = TcpListener::bind(addr).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            Error::InvalidArgument(format!("cannot bind to {addr:?}: {e}"))
        } else {
            Error::io(format!("binding {what} on {addr}"), e)
        }
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io(format!("reading the address of {what}"), e))?
        .port();
    Ok((listener, port))
}

/// Whether `address` looks like "host:port" with a non-zero port.
pub(crate) fn is_host_port(address: &str) -> bool {
    address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0))
}

/// Connects rank `rank` to every other rank and authenticates each
/// connection with `secret`.
///
/// `addresses[i]` is rank i's "host:port"; its length is the job size. Waits
/// at most `config.connect_timeout` in total; connections are then given
/// `config.io_timeout`. With a single rank, opens no connection.
///
/// # Errors
/// * `InvalidArgument`: rank out of range, empty or unparsable address list,
///   empty secret, zero timeout.
/// * `AuthFailed`: a lower rank could not prove it knows the secret.
/// * `VersionMismatch`: a lower rank's address answers with another protocol
///   version, or not as horovod-rs at all.
/// * `Mismatch`: an authenticated peer was given another job size, has
///   another byte order, or claims another rank.
/// * `Timeout`: a peer did not connect, or answer, in time; the message
///   mentions rejected connection attempts (e.g. a rank with another secret).
/// * `PeerLost`: a lower rank closed the connection during the handshake.
/// * `Io`: the file-descriptor limit is below what the mesh needs (checked
///   before any link opens; the message names the limit), or a socket call
///   failed.
pub fn connect(
    listener: Listener,
    rank: usize,
    addresses: &[String],
    secret: &[u8],
    config: &CommConfig,
) -> Result<Communicator> {
    let secret = Secret::new(secret)?;
    validate(rank, addresses, config)?;
    let size = addresses.len();
    let mine = config
        .hostname
        .clone()
        .unwrap_or_else(|| host(&addresses[rank]).to_string());
    if size == 1 {
        return Communicator::over_links(0, vec![None], vec![mine], config);
    }
    // Before any link: past the limit the mesh would fail half open.
    fd_limit::ensure_room_for_mesh(size)?;
    let job = Job {
        rank,
        size,
        secret,
        tls: config.tls,
        connect_timeout: config.connect_timeout.min(MAX_TIMEOUT),
        deadline: Instant::now() + config.connect_timeout.min(MAX_TIMEOUT),
    };
    listener
        .inner
        .set_nonblocking(true)
        .map_err(|e| Error::io("making the listener non-blocking", e))?;

    let first = FirstError::default();
    let abort = Abort::new()?;
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    thread::scope(|scope| {
        let acceptor = if rank + 1 < size {
            let spawned = thread::Builder::new()
                .name("hvd-accept".into())
                .spawn_scoped(scope, || {
                    settle(accept_higher(&listener.inner, &job, &abort), &first, &abort)
                });
            match spawned {
                Ok(handle) => Some(handle),
                Err(e) => {
                    first.record(Error::io("spawning the rendezvous accept thread", e));
                    abort.trigger();
                    None
                }
            }
        } else {
            None
        };
        if let Some(lower) = settle(connect_lower(addresses, &job, &abort), &first, &abort) {
            for (peer, stream) in lower {
                streams[peer] = Some(stream);
            }
        }
        if let Some(handle) = acceptor {
            match handle.join() {
                Ok(Some(higher)) => {
                    for (peer, stream) in higher {
                        streams[peer] = Some(stream);
                    }
                }
                Ok(None) => {}
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    first.into_result()?;

    let credentials = config
        .tls
        .then(|| Credentials::new(&job.secret))
        .transpose()?;
    let mut links = Vec::with_capacity(size);
    // In rank order on every rank, so no two ranks wait for each other's
    // TLS handshakes in a cycle.
    for (peer, stream) in streams.into_iter().enumerate() {
        links.push(match stream {
            Some(stream) => {
                let mut link = Link::new(peer, stream, config.io_timeout.min(MAX_TIMEOUT))?;
                if let Some(credentials) = &credentials {
                    link = link.encrypt(credentials, peer > rank)?;
                }
                Some(link)
            }
            None if peer == rank => None,
            None => {
                return Err(Error::Unusable {
                    cause: format!("rendezvous ended without a connection to rank {peer}"),
                })
            }
        });
    }
    let hosts = hosts::exchange(rank, &links, &mine)?;
    if cores_for_each(rank, &hosts) {
        links = links
            .into_iter()
            .map(|l| l.map(Link::busy_polling))
            .collect();
    }
    Communicator::over_links(rank, links, hosts, config)
}

/// Whether this host has a core for each of its ranks: then a rank waiting
/// for another may poll before it sleeps.
fn cores_for_each(rank: usize, hosts: &[String]) -> bool {
    spin::a_core_each(hosts.iter().filter(|h| **h == hosts[rank]).count())
}

fn validate(rank: usize, addresses: &[String], config: &CommConfig) -> Result<()> {
    let size = addresses.len();
    if size == 0 {
        return Err(Error::InvalidArgument("the address list is empty".into()));
    }
    handshake::check_rank(rank, size)?;
    for (peer, address) in addresses.iter().enumerate() {
        if !is_host_port(address) {
            return Err(Error::InvalidArgument(format!(
                "address of rank {peer} ({address:?}) is not host:port"
            )));
        }
    }
    if config.connect_timeout.is_zero() || config.io_timeout.is_zero() {
        return Err(Error::InvalidArgument(
            "connect_timeout and io_timeout must be positive".into(),
        ));
    }
    if let Some(why) = config.hostname.as_deref().and_then(hosts::refusal) {
        return Err(Error::InvalidArgument(format!("this rank's host: {why}")));
    }
    Ok(())
}

/// What every handshake of this rank needs to know.
struct Job {
    rank: usize,
    size: usize,
    secret: Secret,
    /// Whether this rank encrypts its links (`HOROVOD_RS_TLS`).
    tls: bool,
    connect_timeout: Duration,
    deadline: Instant,
}

impl Job {
    /// Time left until the rendezvous deadline, at least 1 ms (a zero socket
    /// timeout is invalid).
    fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Blocking mode, `TCP_NODELAY`, and socket timeouts ending at the deadline.
    fn prepare(&self, stream: &TcpStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(self.remaining()))?;
        stream.set_write_timeout(Some(self.remaining()))
    }

    fn hello(&self) -> Result<Hello> {
        // Both fit in u32: `validate` checked the size.
        Ok(Hello::new(self.rank as u32, self.size as u32, auth::nonce()?).encrypting(self.tls))
    }

    /// Checks an authenticated peer's hello against this job. `expected` is
    /// the rank the connector dialled; the acceptor accepts any higher rank.
    fn check_peer(&self, hello: &Hello, expected: Option<usize>) -> Result<usize> {
        let peer = hello.rank as usize;
        let named = expected.unwrap_or(peer);
        if hello.endian != NATIVE_ENDIAN {
            return Err(Error::Mismatch {
                rank: named,
                detail: format!(
                    "it is {}, this rank is {}",
                    wire::endian_name(hello.endian),
                    wire::endian_name(NATIVE_ENDIAN)
                ),
            });
        }
        if hello.encrypts != self.tls {
            let setting = |on: bool| if on { "on" } else { "off" };
            return Err(Error::Mismatch {
                rank: named,
                detail: format!(
                    "it has {TLS_VARIABLE} {}, this rank {} (set it alike on every rank)",
                    setting(hello.encrypts),
                    setting(self.tls)
                ),
            });
        }
        if hello.size as usize != self.size {
            return Err(Error::Mismatch {
                rank: named,
                detail: format!("it was given {} ranks, this rank {}", hello.size, self.size),
            });
        }
        match expected {
            Some(expected) if peer != expected => Err(Error::Mismatch {
                rank: expected,
                detail: format!("the address given for rank {expected} belongs to rank {peer}"),
            }),
            None if peer <= self.rank || peer >= self.size => Err(Error::Mismatch {
                rank: peer,
                detail: format!(
                    "it connected as rank {peer} to rank {}, but only higher ranks connect",
                    self.rank
                ),
            }),
            _ => Ok(peer),
        }
    }
}

/// Lets whichever side of rendezvous fails first stop the other promptly.
struct Abort {
    triggered: AtomicBool,
    /// Clone of the connection the connecting side is handshaking on, shut
    /// down on abort to wake it.
    in_flight: Mutex<Option<TcpStream>>,
    /// Wakes the accepting side: on abort, and when a handshake has its
    /// verdict.
    doorbell: Doorbell,
}

impl Abort {
    fn new() -> Result<Abort> {
        Ok(Abort {
            triggered: AtomicBool::new(false),
            in_flight: Mutex::new(None),
            doorbell: Doorbell::new()
                .map_err(|e| Error::io("creating the rendezvous doorbell", e))?,
        })
    }

    fn trigger(&self) {
        self.triggered.store(true, Ordering::SeqCst);
        if let Some(stream) = self.slot().take() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.doorbell.ring();
    }

    fn is_triggered(&self) -> bool {
        self.triggered.load(Ordering::SeqCst)
    }

    /// Registers `stream` to be shut down on abort; false if already aborted.
    fn watch(&self, stream: &TcpStream) -> bool {
        let clone = stream.try_clone().ok();
        let mut slot = self.slot();
        if self.is_triggered() {
            return false;
        }
        *slot = clone;
        true
    }

    fn unwatch(&self) {
        self.slot().take();
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<TcpStream>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Result of one side of rendezvous: `Ok(None)` when it stopped because the
/// other side failed.
type Side = Result<Option<Vec<(usize, TcpStream)>>>;

/// Records a side's failure and stops the other side.
fn settle(side: Side, first: &FirstError, abort: &Abort) -> Option<Vec<(usize, TcpStream)>> {
    match side {
        Ok(streams) => streams,
        Err(error) => {
            first.record(error);
            abort.trigger();
            None
        }
    }
}

// ---------------------------------------------------------------- connecting

/// Connects to every lower rank, in order.
fn connect_lower(addresses: &[String], job: &Job, abort: &Abort) -> Side {
    let mut streams = Vec::with_capacity(job.rank);
    for (peer, address) in addresses.iter().enumerate().take(job.rank) {
        match connect_to(peer, address, job, abort)? {
            Some(stream) => streams.push((peer, stream)),
            None => return Ok(None),
        }
    }
    Ok(Some(streams))
}

fn connect_to(peer: usize, address: &str, job: &Job, abort: &Abort) -> Result<Option<TcpStream>> {
    let mut pause = Duration::from_millis(10);
    let stream = loop {
        if abort.is_triggered() {
            return Ok(None);
        }
        let failure = match open(address, job.remaining().min(MAX_CONNECT_ATTEMPT)) {
            Ok(stream) => break stream,
            Err(e) => e,
        };
        if job.expired() {
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
        thread::sleep(pause.min(job.remaining()));
        pause = (pause * 2).min(MAX_RETRY_PAUSE);
    };
    if !abort.watch(&stream) {
        return Ok(None);
    }
    let result = connect_handshake(&stream, peer, address, job);
    abort.unwatch();
    match result {
        Ok(()) => {
            debug!("rank {}: authenticated rank {peer} at {address}", job.rank);
            Ok(Some(stream))
        }
        Err(_) if abort.is_triggered() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens a TCP connection to "host:port", trying each resolved address.
pub(crate) fn open(address: &str, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host resolved to no address");
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The connector's side of the handshake with rank `peer`.
fn connect_handshake(stream: &TcpStream, peer: usize, address: &str, job: &Job) -> Result<()> {
    const DURING: &str = "the rendezvous handshake";
    let io = |e: io::Error| io_error(e, peer, DURING, job.connect_timeout);
    let dialled = Dialled {
        name: format!("rank {peer} at {address}"),
        kind: KIND_RANK,
        secret_holders: "the ranks",
    };
    job.prepare(stream)
        .map_err(|e| Error::io(format!("configuring the connection to {}", dialled.name), e))?;
    let mut stream = stream;

    let hello = handshake::connect(stream, &job.secret, &job.hello()?, &dialled, io)?;
    job.check_peer(&hello, Some(peer))?;

    // Step 4: the acceptor admits this rank.
    let mut ack = [0u8; 1];
    stream.read_exact(&mut ack).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => Error::PeerLost {
            rank: peer,
            context: format!(
                "during {DURING}: it closed the connection instead of accepting this rank"
            ),
        },
        _ => io(e),
    })?;
    if ack[0] != ACK {
        return Err(Error::VersionMismatch {
            peer: dialled.name,
            detail: format!("it ended the handshake with byte {:#04x}", ack[0]),
        });
    }
    Ok(())
}

// ----------------------------------------------------------------- accepting

/// Outcome of handshaking one incoming connection.
enum Verdict {
    /// An authenticated peer of this job.
    Genuine(usize, TcpStream),
    /// Not (provably) a peer of this job: dropped, rendezvous goes on.
    Rejected(String),
    /// An authenticated peer that disagrees about the job: rendezvous fails.
    Fatal(Error),
}

/// Accepts and authenticates every higher rank.
fn accept_higher(listener: &TcpListener, job: &Job, abort: &Abort) -> Side {
    let (tx, rx) = mpsc::channel::<(u64, Verdict)>();
    thread::scope(|scope| {
        let mut pending: HashMap<u64, TcpStream> = HashMap::new();
        let mut next_id = 0u64;
        let mut found: Vec<Option<TcpStream>> = (0..job.size).map(|_| None).collect();
        let mut missing = job.size - job.rank - 1;
        let mut rejected = 0usize;
        let mut last_rejection = String::new();

        let outcome: Side = 'poll: loop {
            if abort.is_triggered() {
                break Ok(None);
            }
            let mut busy = false;
            match listener.accept() {
                Ok((stream, from)) => {
                    busy = true;
                    debug!("rank {}: connection from {from}", job.rank);
                    let id = next_id;
                    next_id += 1;
                    // Without a clone the handshake could not be woken at
                    // the end of rendezvous: drop such a connection.
                    match stream.try_clone() {
                        Ok(clone) => pending.insert(id, clone),
                        Err(e) => {
                            warn!("rank {}: dropping connection from {from}: {e}", job.rank);
                            continue;
                        }
                    };
                    let tx = tx.clone();
                    let spawned = thread::Builder::new()
                        .name("hvd-handshake".into())
                        .spawn_scoped(scope, move || {
                            let _ = tx.send((id, accept_handshake(stream, from, job)));
                            abort.doorbell.ring();
                        });
                    if let Err(e) = spawned {
                        warn!("rank {}: dropping connection from {from}: {e}", job.rank);
                        pending.remove(&id);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    // E.g. out of descriptors or a connection reset before
                    // accept: not fatal, genuine peers can still come.
                    warn!("rank {}: accept failed: {e}", job.rank);
                    last_rejection = format!("accept failed: {e}");
                    thread::sleep(ACCEPT_RETRY_PAUSE);
                    busy = true;
                }
            }
            while let Ok((id, verdict)) = rx.try_recv() {
                busy = true;
                pending.remove(&id);
                match verdict {
                    Verdict::Genuine(peer, stream) => {
                        if found[peer].is_some() {
                            break 'poll Err(Error::Mismatch {
                                rank: peer,
                                detail: "two connections authenticated as this rank".into(),
                            });
                        }
                        debug!("rank {}: authenticated rank {peer}", job.rank);
                        found[peer] = Some(stream);
                        missing -= 1;
                    }
                    Verdict::Rejected(reason) => {
                        warn!("rank {}: rejected {reason}", job.rank);
                        rejected += 1;
                        last_rejection = reason;
                    }
                    Verdict::Fatal(error) => break 'poll Err(error),
                }
            }
            if missing == 0 {
                let streams = found
                    .iter_mut()
                    .enumerate()
                    .filter_map(|(peer, slot)| slot.take().map(|s| (peer, s)))
                    .collect();
                break Ok(Some(streams));
            }
            if job.expired() {
                break Err(accept_timeout(job, &found, rejected, &last_rejection));
            }
            if !busy {
                if let Err(e) = abort.doorbell.wait(listener, Some(job.remaining())) {
                    warn!("rank {}: waiting for connections failed: {e}", job.rank);
                    thread::sleep(ACCEPT_RETRY_PAUSE);
                }
            }
        };
        // Wake the handshakes still waiting on unauthenticated connections so
        // the scope can end.
        for stream in pending.values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        outcome
    })
}

fn accept_timeout(job: &Job, found: &[Option<TcpStream>], rejected: usize, last: &str) -> Error {
    let missing: Vec<usize> = (job.rank + 1..job.size)
        .filter(|peer| found[*peer].is_none())
        .collect();
    let names: Vec<String> = missing.iter().map(usize::to_string).collect();
    let ranks = match names.len() {
        1 => format!("rank {}", names[0]),
        _ => format!("ranks {}", names.join(", ")),
    };
    let mut what = format!(
        "after {:?} waiting for {ranks} to connect",
        job.connect_timeout
    );
    if rejected > 0 {
        what.push_str(&format!(
            " ({rejected} connection attempt(s) rejected, the last: {last})"
        ));
    } else if !last.is_empty() {
        what.push_str(&format!(" ({last})"));
    }
    Error::Timeout {
        what,
        rank: missing.first().copied(),
    }
}

fn accept_handshake(stream: TcpStream, from: SocketAddr, job: &Job) -> Verdict {
    match try_accept(&stream, from, job) {
        Ok(peer) => Verdict::Genuine(peer, stream),
        Err(verdict) => verdict,
    }
}

/// The acceptor's side of the handshake.
fn try_accept(
    stream: &TcpStream,
    from: SocketAddr,
    job: &Job,
) -> std::result::Result<usize, Verdict> {
    let reject = |what: String| Verdict::Rejected(format!("connection from {from}: {what}"));
    let io = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "no complete handshake before the deadline".to_string()
        }
        io::ErrorKind::UnexpectedEof => "closed during the handshake".to_string(),
        _ => format!("handshake failed: {e}"),
    };
    job.prepare(stream).map_err(|e| reject(io(e)))?;
    let mut stream = stream;

    let ours = job.hello().map_err(Verdict::Fatal)?;
    let hello = handshake::accept(stream, &job.secret, &ours, KIND_RANK, io).map_err(reject)?;
    let peer = job.check_peer(&hello, None).map_err(Verdict::Fatal)?;
    // Step 4: admit the rank.
    stream.write_all(&[ACK]).map_err(|e| reject(io(e)))?;
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::TAG_LEN;
    use crate::reduce::ReduceOp;
    use crate::wire::{HELLO_LEN, PREFIX_LEN};

    fn config(connect_ms: u64) -> CommConfig {
        CommConfig {
            connect_timeout: Duration::from_millis(connect_ms),
            io_timeout: Duration::from_secs(10),
            ..CommConfig::default()
        }
    }

    #[test]
    fn invalid_arguments_are_refused() {
        let cases: [(usize, Vec<&str>, &[u8]); 6] = [
            (0, vec![], b"s"),
            (2, vec!["h:1", "h:2"], b"s"),
            (0, vec!["h:1", "nocolon"], b"s"),
            (0, vec!["h:1", ":5"], b"s"),
            (0, vec!["h:1", "h:99999"], b"s"),
            (0, vec!["h:1"], b""),
        ];
        for (rank, addresses, secret) in cases {
            let addresses: Vec<String> = addresses.into_iter().map(String::from).collect();
            let listener = Listener::bind("127.0.0.1:0").unwrap();
            let err = connect(listener, rank, &addresses, secret, &config(100)).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument(_)),
                "{addresses:?}: {err}"
            );
        }
        let err = Listener::bind("not an address").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }

    #[test]
    fn communicator_and_listener_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<Communicator>();
        send::<Listener>();
    }

    #[test]
    fn huge_timeouts_do_not_overflow() {
        let (address, handle) = rank0(5_000);
        let listener = Listener::bind("127.0.0.1:0").unwrap();
        let addresses = vec![address, format!("127.0.0.1:{}", listener.port())];
        let huge = CommConfig {
            connect_timeout: Duration::MAX,
            io_timeout: Duration::MAX,
            ..CommConfig::default()
        };
        let mut c1 = connect(listener, 1, &addresses, b"secret", &huge).unwrap();
        let mut c0 = handle.join().unwrap().unwrap();
        let t = thread::spawn(move || c1.barrier());
        c0.barrier().unwrap();
        t.join().unwrap().unwrap();
    }

    #[test]
    fn single_rank_needs_no_peer() {
        let listener = Listener::bind("127.0.0.1:0").unwrap();
        assert_ne!(listener.port(), 0);
        let mut comm = connect(listener, 0, &["unused:1".into()], b"s", &config(100)).unwrap();
        assert_eq!((comm.rank(), comm.size()), (0, 1));
        let mut data = [1.0f32, 2.0];
        comm.allreduce(&mut data, ReduceOp::Average).unwrap();
        assert_eq!(data, [1.0, 2.0]);
        comm.barrier().unwrap();
    }

    /// Runs rank 0 of a two-rank job on a thread; returns its address and handle.
    fn rank0(connect_ms: u64) -> (String, thread::JoinHandle<Result<Communicator>>) {
        let listener = Listener::bind("127.0.0.1:0").unwrap();
        let address = format!("127.0.0.1:{}", listener.port());
        let addresses = vec![address.clone(), "127.0.0.1:9".to_string()];
        let handle =
            thread::spawn(move || connect(listener, 0, &addresses, b"secret", &config(connect_ms)));
        (address, handle)
    }

    fn rank1(rank0: &str, secret: &[u8]) -> Result<Communicator> {
        let listener = Listener::bind("127.0.0.1:0").unwrap();
        let addresses = vec![rank0.to_string(), format!("127.0.0.1:{}", listener.port())];
        connect(listener, 1, &addresses, secret, &config(5_000))
    }

    #[test]
    fn forged_hello_without_the_secret_does_not_stop_rendezvous() {
        let (address, handle) = rank0(5_000);
        // A well-formed hello followed by a made-up proof.
        let mut forger = TcpStream::connect(&address).unwrap();
        forger
            .write_all(&Hello::new(1, 2, [9u8; auth::NONCE_LEN]).encode())
            .unwrap();
        let mut reply = [0u8; HELLO_LEN + TAG_LEN];
        forger.read_exact(&mut reply).unwrap();
        forger.write_all(&[0u8; TAG_LEN]).unwrap();
        let mut rest = Vec::new();
        let _ = forger.read_to_end(&mut rest);
        assert!(rest.is_empty(), "no ACK for a forged proof");
        // The genuine rank 1 still gets in.
        let mut c1 = rank1(&address, b"secret").unwrap();
        let mut c0 = handle.join().unwrap().unwrap();
        let t = thread::spawn(move || c1.barrier().map(|_| c1));
        c0.barrier().unwrap();
        t.join().unwrap().unwrap();
    }

    #[test]
    fn other_protocol_version_is_named() {
        // A fake acceptor of another version answering a real connector.
        let fake = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = fake.local_addr().unwrap().to_string();
        let server = thread::spawn(move || {
            let (mut s, _) = fake.accept().unwrap();
            let mut hello = [0u8; HELLO_LEN];
            s.read_exact(&mut hello).unwrap();
            let mut answer = Hello::new(0, 2, [1u8; auth::NONCE_LEN]).encode();
            answer[8..10].copy_from_slice(&99u16.to_le_bytes());
            s.write_all(&answer).unwrap();
        });
        let err = rank1(&address, b"secret").unwrap_err();
        server.join().unwrap();
        assert!(matches!(err, Error::VersionMismatch { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("speaks protocol version 99, this library speaks "),
            "{err}"
        );
    }

    #[test]
    fn acceptor_answers_other_version_and_keeps_waiting() {
        let (address, handle) = rank0(600);
        let mut old = TcpStream::connect(&address).unwrap();
        let mut hello = Hello::new(1, 2, [3u8; auth::NONCE_LEN]).encode();
        hello[8..10].copy_from_slice(&99u16.to_le_bytes());
        old.write_all(&hello).unwrap();
        let mut answer = [0u8; PREFIX_LEN];
        old.read_exact(&mut answer).unwrap();
        assert_eq!(wire::check_prefix(&answer), Ok(()));
        let err = handle.join().unwrap().unwrap_err();
        assert!(matches!(err, Error::Timeout { rank: Some(1), .. }), "{err}");
        assert!(err.to_string().contains("protocol version 99"), "{err}");
    }

    #[test]
    fn wrong_secret_fails_fast_on_the_connector() {
        let (address, handle) = rank0(800);
        let started = Instant::now();
        let err = rank1(&address, b"other").unwrap_err();
        assert!(matches!(err, Error::AuthFailed { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_millis(500));
        let err = handle.join().unwrap().unwrap_err();
        assert!(matches!(err, Error::Timeout { rank: Some(1), .. }), "{err}");
        assert!(err.to_string().contains("different secret"), "{err}");
    }
}
