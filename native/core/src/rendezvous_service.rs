//! The driver's rendezvous service: gathers every rank's entry and sends each
//! rank the whole list, so the ranks learn each other's listener addresses.
//!
//! The Spark driver starts a [`RendezvousService`] before it submits the
//! barrier stage and gives the tasks its "host:port" and the job secret. Each
//! task calls [`exchange_entries`], which registers the task's entry (its
//! listener's "host:port", or an error text) and returns every rank's entry,
//! in rank order, as soon as the last rank has registered. The service does
//! not interpret entries.
//!
//! Handshake, on each connection (client C, a rank; service S), with the
//! hellos of [`crate::wire`] marked with their kind of endpoint, so neither
//! can be mistaken for a rank's listener:
//! 1. C → S: C's hello (kind "service client", rank, job size, nonce)
//! 2. S → C: S's hello (kind "service", its job size), S's proof
//! 3. C → S: C's proof (only after C verified S's), then the register request
//! 4. S → C: the reply, once every rank of C's stage attempt has registered
//!
//! Proofs are those of the mesh ([`crate::auth`]); the kind bytes in the
//! transcript keep them apart from the mesh's.
//!
//! Frames: a u32 length, then that many bytes (integers little-endian).
//! * Register request: the u32 stage attempt, then the entry (UTF-8, at most
//!   [`MAX_ENTRY_LEN`] bytes).
//! * Reply: a status byte, then for [`ENTRIES`] a u32 count and as many
//!   entries, each a u32 length and UTF-8 bytes; for [`REFUSED`] and
//!   [`SUPERSEDED`] a UTF-8 message.
//!
//! Spark reruns a failed barrier stage as a new stage attempt, so
//! registrations are grouped by attempt and each attempt gets its own list. A
//! rank registering again in an attempt replaces its earlier registration,
//! whose connection is told so and closed. Once an attempt's list is sent the
//! attempt is forgotten: a later registration for it starts a new round.
//!
//! Invariant: every connection is handled on its own thread with socket
//! timeouts, and only authenticated registrations reach the shared state; a
//! connection that sends garbage, stays silent, is of another kind or version
//! or cannot prove the secret is logged and dropped without affecting the
//! others. Dropping the service shuts every connection down, so waiting ranks
//! fail at once with `ServiceLost`.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use log::{debug, warn};

use crate::auth::{self, Role, Secret, TAG_LEN};
use crate::error::{Error, Result};
use crate::rendezvous::{
    self, kind_mismatch, version_mismatch, ACCEPT_POLL, MAX_CONNECT_ATTEMPT, MAX_TIMEOUT,
};
use crate::wire::{
    self, Hello, PrefixError, HELLO_LEN, KIND_SERVICE, KIND_SERVICE_CLIENT, PREFIX_LEN,
};

/// Longest entry a rank may register, in bytes.
const MAX_ENTRY_LEN: usize = 64 * 1024;
/// Longest register request: the attempt number and an entry.
const MAX_REQUEST_LEN: usize = 4 + MAX_ENTRY_LEN;
/// Reply status: every rank's entry follows.
const ENTRIES: u8 = 0;
/// Reply status: the service refused the registration; a message follows.
const REFUSED: u8 = 1;
/// Reply status: the rank registered again on another connection, which
/// replaced this one; a message follows.
const SUPERSEDED: u8 = 2;
/// Timeout of each read and write of the service on a connection: a client
/// silent for this long during the handshake, or not reading its reply, is
/// dropped.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between attempts to reach a service not listening yet.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(100);

// ------------------------------------------------------------------- service

/// The driver's rendezvous service for a job of `size` ranks.
///
/// Accepts connections on a background thread and serves each on its own
/// thread until dropped. Dropping it stops accepting and closes every open
/// connection, so ranks still waiting fail with [`Error::ServiceLost`].
pub struct RendezvousService {
    shared: Arc<Shared>,
    port: u16,
    accept: Option<JoinHandle<()>>,
}

impl RendezvousService {
    /// Starts the service for a job of `size` ranks authenticated with
    /// `secret`, listening on `bind_addr`, e.g. "0.0.0.0:0" (any interface, a
    /// free port).
    ///
    /// # Errors
    /// * `InvalidArgument`: empty secret, zero or too many ranks, unusable
    ///   bind address.
    /// * `Io`: the port cannot be bound, or the accept thread not spawned.
    pub fn start(bind_addr: &str, secret: &[u8], size: usize) -> Result<RendezvousService> {
        let secret = Secret::new(secret)?;
        if size == 0 {
            return Err(Error::InvalidArgument("the job size is zero".into()));
        }
        if u32::try_from(size).is_err() {
            return Err(Error::InvalidArgument(format!("{size} ranks are too many")));
        }
        let (listener, port) = rendezvous::bind(bind_addr, "the rendezvous service")?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("making the rendezvous service's listener non-blocking", e))?;
        let shared = Arc::new(Shared {
            size,
            secret,
            stopping: AtomicBool::new(false),
            state: Mutex::new(State {
                stopped: false,
                next_id: 0,
                open: HashMap::new(),
                rounds: Rounds::new(size),
                ready: HashMap::new(),
            }),
            changed: Condvar::new(),
        });
        let accept = thread::Builder::new()
            .name("hvd-rdzv-accept".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept_loop(&listener, &shared)
            })
            .map_err(|e| Error::io("spawning the rendezvous service's accept thread", e))?;
        debug!("rendezvous service for {size} ranks listening on {bind_addr}, port {port}");
        Ok(RendezvousService {
            shared,
            port,
            accept: Some(accept),
        })
    }

    /// The port the service listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RendezvousService {
    /// Stops accepting and shuts every open connection down. Waits only for
    /// the accept thread, which notices within one poll interval; connection
    /// threads end on their own once their sockets are shut down.
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        {
            let mut state = self.shared.lock();
            state.stopped = true;
            for (attempt, missing) in state.rounds.missing() {
                warn!(
                    "rendezvous service on port {}: stopped before rank(s) {missing:?} of stage attempt {attempt} registered",
                    self.port
                );
            }
            for stream in state.open.values() {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
        self.shared.changed.notify_all();
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        debug!("rendezvous service on port {} stopped", self.port);
    }
}

impl std::fmt::Debug for RendezvousService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendezvousService")
            .field("port", &self.port)
            .field("size", &self.shared.size)
            .finish_non_exhaustive()
    }
}

/// What the accept thread and the connection threads share.
struct Shared {
    size: usize,
    secret: Secret,
    /// Set when the service is dropped; polled by the accept thread.
    stopping: AtomicBool,
    state: Mutex<State>,
    /// Signalled when replies are ready or the service stops.
    changed: Condvar,
}

struct State {
    /// Set, under this lock, when the service is dropped: no connection is
    /// tracked or registered afterwards.
    stopped: bool,
    next_id: u64,
    /// A clone of every open connection by id, shut down when the service
    /// stops.
    open: HashMap<u64, TcpStream>,
    rounds: Rounds,
    /// Encoded replies for the connections whose wait is over, by id.
    ready: HashMap<u64, Arc<Vec<u8>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `registration`, made on connection `id`, and waits for the
    /// reply to send on it; None if the service stopped first.
    fn register_and_wait(&self, id: u64, registration: Registration) -> Option<Arc<Vec<u8>>> {
        let mut state = self.lock();
        if state.stopped {
            return None;
        }
        let Registration {
            attempt,
            rank,
            entry,
        } = registration;
        let replies = state.rounds.register(id, attempt, rank, entry);
        if !replies.is_empty() {
            state.ready.extend(replies);
            self.changed.notify_all();
        }
        loop {
            if let Some(reply) = state.ready.remove(&id) {
                return Some(reply);
            }
            if state.stopped {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, from)) => spawn_connection(stream, from, shared),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(e) => {
                // E.g. out of descriptors or a connection reset before
                // accept: not fatal, genuine ranks can still come.
                warn!("rendezvous service: accept failed: {e}");
                thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

/// Tracks `stream` and serves it on a thread of its own.
fn spawn_connection(stream: TcpStream, from: SocketAddr, shared: &Arc<Shared>) {
    debug!("rendezvous service: connection from {from}");
    // Without a clone the connection could not be shut down when the service
    // stops: drop such a connection.
    let clone = match stream.try_clone() {
        Ok(clone) => clone,
        Err(e) => {
            warn!("rendezvous service: dropping connection from {from}: {e}");
            return;
        }
    };
    let id = {
        let mut state = shared.lock();
        if state.stopped {
            return;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.open.insert(id, clone);
        id
    };
    let spawned = thread::Builder::new().name("hvd-rdzv-conn".into()).spawn({
        let shared = Arc::clone(shared);
        move || {
            serve(&shared, id, stream, from);
            shared.lock().open.remove(&id);
        }
    });
    if let Err(e) = spawned {
        warn!("rendezvous service: dropping connection from {from}: {e}");
        shared.lock().open.remove(&id);
    }
}

/// Serves one connection: handshake, registration, reply.
fn serve(shared: &Shared, id: u64, stream: TcpStream, from: SocketAddr) {
    let registration = match admit(&stream, shared) {
        Ok(registration) => registration,
        Err(reason) => {
            warn!("rendezvous service: rejected connection from {from}: {reason}");
            return;
        }
    };
    let (rank, attempt) = (registration.rank, registration.attempt);
    debug!("rendezvous service: rank {rank} of stage attempt {attempt} registered from {from}");
    let Some(reply) = shared.register_and_wait(id, registration) else {
        return;
    };
    if let Err(e) = (&stream).write_all(&reply) {
        warn!("rendezvous service: cannot answer rank {rank} of stage attempt {attempt} at {from}: {e}");
    }
}

/// An authenticated rank's registration.
#[derive(Debug)]
struct Registration {
    attempt: u32,
    rank: usize,
    entry: String,
}

/// The service's side of the handshake, then the register request. Errors
/// are the reason to drop the connection, for the log.
fn admit(stream: &TcpStream, shared: &Shared) -> std::result::Result<Registration, String> {
    let io = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("nothing received for {CONNECTION_TIMEOUT:?}")
        }
        io::ErrorKind::UnexpectedEof => "closed before registering".to_string(),
        _ => format!("handshake failed: {e}"),
    };
    prepare(stream, CONNECTION_TIMEOUT).map_err(io)?;
    let mut stream = stream;

    let mut theirs = [0u8; HELLO_LEN];
    stream.read_exact(&mut theirs[..PREFIX_LEN]).map_err(io)?;
    let mut prefix = [0u8; PREFIX_LEN];
    prefix.copy_from_slice(&theirs[..PREFIX_LEN]);
    // The size fits in u32: `start` checked it.
    let nonce = auth::nonce().map_err(|e| e.to_string())?;
    let ours = Hello::of_kind(KIND_SERVICE, 0, shared.size as u32, nonce).encode();
    match wire::check_prefix(&prefix) {
        Ok(()) => {}
        Err(PrefixError::BadMagic) => return Err("not a horovod-rs hello".into()),
        Err(PrefixError::Version(version)) => {
            // Answer with our hello so the peer can name the mismatch.
            let _ = stream.write_all(&ours);
            return Err(format!(
                "it speaks protocol version {version}, this library speaks {}",
                wire::PROTOCOL_VERSION
            ));
        }
    }
    stream.read_exact(&mut theirs[PREFIX_LEN..]).map_err(io)?;
    let hello = Hello::decode(&theirs).map_err(|_| "malformed hello".to_string())?;
    if hello.kind != KIND_SERVICE_CLIENT {
        let _ = stream.write_all(&ours);
        return Err(format!(
            "it is {}, not {}",
            wire::kind_name(hello.kind),
            wire::kind_name(KIND_SERVICE_CLIENT)
        ));
    }
    let transcript = [theirs, ours].concat();
    let mut reply = Vec::with_capacity(HELLO_LEN + TAG_LEN);
    reply.extend_from_slice(&ours);
    reply.extend_from_slice(&shared.secret.prove(Role::Acceptor, &transcript));
    stream.write_all(&reply).map_err(io)?;

    let mut their_proof = [0u8; TAG_LEN];
    stream
        .read_exact(&mut their_proof)
        .map_err(|e| match e.kind() {
            // A genuine rank closes here when our proof fails with its secret.
            io::ErrorKind::UnexpectedEof => "it closed the connection instead of proving it \
                knows the job secret (a rank given a different secret does this)"
                .to_string(),
            _ => io(e),
        })?;
    if !shared
        .secret
        .verify(Role::Connector, &transcript, &their_proof)
    {
        return Err("it could not prove it knows the job secret".into());
    }

    // Authenticated: a registration the service cannot take is answered.
    let payload = read_frame(&mut stream, MAX_REQUEST_LEN).map_err(io)?;
    let refusal = match decode_request(&payload) {
        Ok(_) if hello.size as usize != shared.size => format!(
            "rank {} was given {} ranks, the service's job has {}",
            hello.rank, hello.size, shared.size
        ),
        Ok(_) if hello.rank as usize >= shared.size => format!(
            "rank {} is out of range for the service's job of {} ranks",
            hello.rank, shared.size
        ),
        Ok((attempt, entry)) => {
            return Ok(Registration {
                attempt,
                rank: hello.rank as usize,
                entry,
            })
        }
        Err(detail) => detail,
    };
    let _ = stream.write_all(&encode_message(REFUSED, &refusal));
    Err(format!("refused rank {}: {refusal}", hello.rank))
}

/// Blocking mode, `TCP_NODELAY`, and read and write timeouts of `timeout`.
fn prepare(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))
}

/// The registrations of the stage attempts still gathering entries.
struct Rounds {
    size: usize,
    gathering: HashMap<u32, Round>,
}

/// One attempt's registrations so far.
struct Round {
    /// `slots[rank]`: the connection that registered `rank`, and its entry.
    slots: Vec<Option<(u64, String)>>,
    registered: usize,
}

impl Rounds {
    fn new(size: usize) -> Rounds {
        Rounds {
            size,
            gathering: HashMap::new(),
        }
    }

    /// Records `entry` for `rank` (below the size) of `attempt`, registered
    /// on connection `id`. Returns the connections to answer now, each with
    /// its encoded reply: a registration this one replaced, and every rank of
    /// the attempt when this was its last missing rank.
    fn register(
        &mut self,
        id: u64,
        attempt: u32,
        rank: usize,
        entry: String,
    ) -> Vec<(u64, Arc<Vec<u8>>)> {
        let size = self.size;
        let round = self.gathering.entry(attempt).or_insert_with(|| Round {
            slots: vec![None; size],
            registered: 0,
        });
        let mut replies = Vec::new();
        match round.slots[rank].replace((id, entry)) {
            Some((replaced, _)) => {
                let message = format!(
                    "rank {rank} registered again for stage attempt {attempt}, replacing this registration"
                );
                replies.push((replaced, Arc::new(encode_message(SUPERSEDED, &message))));
            }
            None => round.registered += 1,
        }
        if round.registered < size {
            return replies;
        }
        let Some(round) = self.gathering.remove(&attempt) else {
            return replies;
        };
        let (ids, entries): (Vec<u64>, Vec<String>) = round.slots.into_iter().flatten().unzip();
        let reply = encode_entries(&entries).unwrap_or_else(|| {
            encode_message(
                REFUSED,
                &format!("the entries of the {size} ranks exceed the 4 GiB a reply can hold"),
            )
        });
        debug!("rendezvous service: every rank of stage attempt {attempt} registered");
        let reply = Arc::new(reply);
        replies.extend(ids.into_iter().map(|id| (id, Arc::clone(&reply))));
        replies
    }

    /// Each attempt still gathering, with the ranks it misses.
    fn missing(&self) -> Vec<(u32, Vec<usize>)> {
        let mut missing: Vec<(u32, Vec<usize>)> = self
            .gathering
            .iter()
            .map(|(attempt, round)| {
                let ranks = (0..self.size)
                    .filter(|rank| round.slots[*rank].is_none())
                    .collect();
                (*attempt, ranks)
            })
            .collect();
        missing.sort_unstable();
        missing
    }
}

// -------------------------------------------------------------------- client

/// Registers `entry` as rank `rank`'s of stage attempt `attempt` with the
/// driver's rendezvous service at `service_addr` ("host:port"), and returns
/// every rank's entry of that attempt, in rank order.
///
/// `size` is the job size and must be the service's; `entry` is at most
/// 64 KiB of UTF-8. Connecting is retried (the service may not listen yet)
/// and the whole call takes at most `timeout`.
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
    validate(service_addr, rank, size, entry, timeout)?;
    let timeout = timeout.min(MAX_TIMEOUT);
    let client = Client {
        address: service_addr,
        rank,
        size,
        attempt,
        secret,
        timeout,
        deadline: Instant::now() + timeout,
    };
    let stream = client.reach()?;
    let result = client.register(&stream, entry);
    let _ = stream.shutdown(Shutdown::Both);
    if let Ok(entries) = &result {
        debug!(
            "rank {rank}: received the {} entries of stage attempt {attempt}",
            entries.len()
        );
    }
    result
}

fn validate(address: &str, rank: usize, size: usize, entry: &str, timeout: Duration) -> Result<()> {
    if size == 0 {
        return Err(Error::InvalidArgument("the job size is zero".into()));
    }
    if u32::try_from(size).is_err() {
        return Err(Error::InvalidArgument(format!("{size} ranks are too many")));
    }
    if rank >= size {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is out of range for {size} ranks"
        )));
    }
    if !rendezvous::is_host_port(address) {
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
        format!("the driver's rendezvous service at {}", self.address)
    }

    /// Connects to the service, retrying until the deadline.
    fn reach(&self) -> Result<TcpStream> {
        let mut pause = Duration::from_millis(10);
        loop {
            let failure =
                match rendezvous::open(self.address, self.remaining().min(MAX_CONNECT_ATTEMPT)) {
                    Ok(stream) => return Ok(stream),
                    Err(e) => e,
                };
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
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
    }

    /// The client's side of the handshake, the request, and the reply.
    fn register(&self, stream: &TcpStream, entry: &str) -> Result<Vec<String>> {
        let handshake = |e: io::Error| self.io_error(e, Phase::Handshake);
        prepare(stream, self.remaining()).map_err(|e| {
            Error::io(
                format!("configuring the connection to {}", self.service()),
                e,
            )
        })?;
        let mut stream = stream;

        // Both fit in u32: `validate` checked the size.
        let ours = Hello::of_kind(
            KIND_SERVICE_CLIENT,
            self.rank as u32,
            self.size as u32,
            auth::nonce()?,
        )
        .encode();
        stream.write_all(&ours).map_err(handshake)?;

        let mut theirs = [0u8; HELLO_LEN];
        stream
            .read_exact(&mut theirs[..PREFIX_LEN])
            .map_err(handshake)?;
        let mut prefix = [0u8; PREFIX_LEN];
        prefix.copy_from_slice(&theirs[..PREFIX_LEN]);
        wire::check_prefix(&prefix).map_err(|e| version_mismatch(self.service(), e))?;
        stream
            .read_exact(&mut theirs[PREFIX_LEN..])
            .map_err(handshake)?;
        let hello = Hello::decode(&theirs).map_err(|e| version_mismatch(self.service(), e))?;
        if hello.kind != KIND_SERVICE {
            return Err(kind_mismatch(self.service(), hello.kind, KIND_SERVICE));
        }
        let mut their_proof = [0u8; TAG_LEN];
        stream.read_exact(&mut their_proof).map_err(handshake)?;
        let transcript = [ours, theirs].concat();
        if !self
            .secret
            .verify(Role::Acceptor, &transcript, &their_proof)
        {
            return Err(Error::AuthFailed {
                detail: format!(
                    "{} could not prove it knows the job secret (were the driver and the ranks given different secrets?)",
                    self.service()
                ),
            });
        }
        let mut message = self.secret.prove(Role::Connector, &transcript).to_vec();
        message.extend_from_slice(&encode_request(self.attempt, entry));
        stream.write_all(&message).map_err(handshake)?;

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
                address: self.address.to_string(),
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

// -------------------------------------------------------------------- frames

/// Reads one frame's payload, refusing (`InvalidData`) one longer than `max`.
/// The buffer grows as bytes arrive, so a length prefix alone (a reply may
/// announce up to 4 GiB) allocates nothing.
fn read_frame(reader: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, more than the {max} expected"),
        ));
    }
    let mut payload = Vec::new();
    reader.by_ref().take(len as u64).read_to_end(&mut payload)?;
    if payload.len() < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the frame ends after {} of its {len} bytes", payload.len()),
        ));
    }
    Ok(payload)
}

/// Longest reply for a job of `size` ranks.
fn max_reply_len(size: usize) -> usize {
    size.saturating_mul(4 + MAX_ENTRY_LEN)
        .saturating_add(1 + 4)
        .min(u32::MAX as usize)
}

/// The register request frame. `entry` is at most [`MAX_ENTRY_LEN`] bytes.
fn encode_request(attempt: u32, entry: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + entry.len());
    out.extend_from_slice(&((4 + entry.len()) as u32).to_le_bytes());
    out.extend_from_slice(&attempt.to_le_bytes());
    out.extend_from_slice(entry.as_bytes());
    out
}

/// The attempt and entry of a register request's payload.
fn decode_request(payload: &[u8]) -> std::result::Result<(u32, String), String> {
    let Some((attempt, entry)) = payload.split_first_chunk::<4>() else {
        return Err(format!(
            "a register request of {} bytes has no attempt number",
            payload.len()
        ));
    };
    if entry.len() > MAX_ENTRY_LEN {
        return Err(format!(
            "the entry is {} bytes, more than the {MAX_ENTRY_LEN} the service accepts",
            entry.len()
        ));
    }
    let entry = String::from_utf8(entry.to_vec()).map_err(|_| "the entry is not UTF-8")?;
    Ok((u32::from_le_bytes(*attempt), entry))
}

/// The reply frame carrying `entries`; None if it would not fit a frame.
fn encode_entries(entries: &[String]) -> Option<Vec<u8>> {
    let len = entries
        .iter()
        .try_fold(1usize + 4, |len, entry| len.checked_add(4 + entry.len()))?;
    let frame_len = u32::try_from(len).ok()?;
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&frame_len.to_le_bytes());
    out.push(ENTRIES);
    // Both fit: each is below the frame length.
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for entry in entries {
        out.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        out.extend_from_slice(entry.as_bytes());
    }
    Some(out)
}

/// A reply frame of `status` carrying a message.
fn encode_message(status: u8, message: &str) -> Vec<u8> {
    // Messages are short texts of this module.
    let mut out = Vec::with_capacity(5 + message.len());
    out.extend_from_slice(&((1 + message.len()) as u32).to_le_bytes());
    out.push(status);
    out.extend_from_slice(message.as_bytes());
    out
}

/// What the service answered.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// Every rank's entry, in rank order.
    Entries(Vec<String>),
    /// The registration was refused, and why.
    Refused(String),
    /// Another registration of the same rank replaced this one.
    Superseded(String),
}

/// Parses a reply payload expected to carry `size` entries.
fn decode_reply(payload: &[u8], size: usize) -> std::result::Result<Reply, String> {
    let Some((&status, mut rest)) = payload.split_first() else {
        return Err("an empty reply".into());
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    match status {
        ENTRIES => {}
        REFUSED => return Ok(Reply::Refused(text(rest))),
        SUPERSEDED => return Ok(Reply::Superseded(text(rest))),
        other => return Err(format!("unknown reply status {other}")),
    }
    let take_u32 = |rest: &mut &[u8]| {
        let (value, tail) = rest
            .split_first_chunk::<4>()
            .ok_or("the reply ends inside a length")?;
        *rest = tail;
        Ok::<usize, String>(u32::from_le_bytes(*value) as usize)
    };
    let count = take_u32(&mut rest)?;
    if count != size {
        return Err(format!("{count} entries for a job of {size} ranks"));
    }
    // Each entry takes at least its length: the count cannot reserve more
    // than the reply holds.
    if count > rest.len() / 4 {
        return Err(format!(
            "{count} entries cannot fit in the {} bytes left of the reply",
            rest.len()
        ));
    }
    let mut entries = Vec::with_capacity(count);
    for rank in 0..count {
        let len = take_u32(&mut rest)?;
        if len > rest.len() {
            return Err(format!("the entry of rank {rank} overruns the reply"));
        }
        let (entry, tail) = rest.split_at(len);
        rest = tail;
        let entry = String::from_utf8(entry.to_vec())
            .map_err(|_| format!("the entry of rank {rank} is not UTF-8"))?;
        entries.push(entry);
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last entry", rest.len()));
    }
    Ok(Reply::Entries(entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(frame: &[u8]) -> Vec<u8> {
        read_frame(&mut &frame[..], usize::MAX).unwrap()
    }

    fn entries(of: &[&str]) -> Vec<String> {
        of.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn request_round_trips() {
        let frame = encode_request(7, "10.0.0.1:4000");
        assert_eq!(frame[..4], (4 + 13u32).to_le_bytes());
        assert_eq!(
            decode_request(&payload(&frame)),
            Ok((7, "10.0.0.1:4000".to_string()))
        );
        assert_eq!(
            decode_request(&payload(&encode_request(0, ""))),
            Ok((0, String::new()))
        );
    }

    #[test]
    fn malformed_requests_are_refused() {
        assert!(decode_request(&[1, 0]).is_err());
        assert!(decode_request(&[0, 0, 0, 0, 0xff]).is_err());
        let long = vec![b'a'; 4 + MAX_ENTRY_LEN + 1];
        let err = decode_request(&long).unwrap_err();
        assert!(err.contains("more than the 65536"), "{err}");
    }

    #[test]
    fn reply_round_trips() {
        let list = entries(&["h0:1", "!no listener: address in use", ""]);
        let frame = encode_entries(&list).unwrap();
        assert_eq!(
            decode_reply(&payload(&frame), 3),
            Ok(Reply::Entries(list.clone()))
        );
        let frame = encode_message(SUPERSEDED, "replaced");
        assert_eq!(
            decode_reply(&payload(&frame), 3),
            Ok(Reply::Superseded("replaced".into()))
        );
        let frame = encode_message(REFUSED, "no");
        assert_eq!(
            decode_reply(&payload(&frame), 1),
            Ok(Reply::Refused("no".into()))
        );
    }

    #[test]
    fn malformed_replies_are_named() {
        let good = payload(&encode_entries(&entries(&["a:1", "b:2"])).unwrap());
        let err = decode_reply(&good, 3).unwrap_err();
        assert_eq!(err, "2 entries for a job of 3 ranks");
        assert!(decode_reply(&good[..good.len() - 1], 2)
            .unwrap_err()
            .contains("overruns"));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_reply(&trailing, 2).unwrap_err().contains("after"));
        assert!(decode_reply(&good[..3], 2)
            .unwrap_err()
            .contains("inside a length"));
        assert!(decode_reply(&[], 2).is_err());
        assert_eq!(decode_reply(&[9], 2).unwrap_err(), "unknown reply status 9");
    }

    #[test]
    fn frame_length_is_bounded() {
        let frame = encode_request(0, "0123456789");
        let err = read_frame(&mut &frame[..], 8).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("14 bytes"), "{err}");
        assert_eq!(max_reply_len(2), 5 + 2 * (4 + MAX_ENTRY_LEN));
        assert_eq!(max_reply_len(usize::MAX), u32::MAX as usize);
    }

    /// The entries a reply carries, if it is a list.
    fn list(reply: &[u8]) -> Vec<String> {
        match decode_reply(&payload(reply), 2).unwrap() {
            Reply::Entries(entries) => entries,
            other => panic!("not a list: {other:?}"),
        }
    }

    #[test]
    fn attempts_are_kept_apart() {
        let mut rounds = Rounds::new(2);
        assert!(rounds.register(1, 0, 1, "a0-r1".into()).is_empty());
        assert!(rounds.register(2, 1, 0, "a1-r0".into()).is_empty());
        assert_eq!(rounds.missing(), vec![(0, vec![0]), (1, vec![1])]);
        let replies = rounds.register(3, 1, 1, "a1-r1".into());
        let ids: Vec<u64> = replies.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [2, 3]);
        assert_eq!(list(&replies[0].1), ["a1-r0", "a1-r1"]);
        let replies = rounds.register(4, 0, 0, "a0-r0".into());
        let ids: Vec<u64> = replies.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [4, 1]);
        assert_eq!(list(&replies[1].1), ["a0-r0", "a0-r1"]);
        assert!(rounds.missing().is_empty());
        // A completed attempt is forgotten: registering again starts anew.
        assert!(rounds.register(5, 0, 0, "again".into()).is_empty());
        assert_eq!(rounds.missing(), vec![(0, vec![1])]);
    }

    #[test]
    fn registering_again_replaces_the_earlier_registration() {
        let mut rounds = Rounds::new(2);
        assert!(rounds.register(1, 0, 0, "old".into()).is_empty());
        let replies = rounds.register(2, 0, 0, "new".into());
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].0, 1);
        match decode_reply(&payload(&replies[0].1), 2).unwrap() {
            Reply::Superseded(message) => assert_eq!(
                message,
                "rank 0 registered again for stage attempt 0, replacing this registration"
            ),
            other => panic!("{other:?}"),
        }
        let replies = rounds.register(3, 0, 1, "b".into());
        let ids: Vec<u64> = replies.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [2, 3]);
        assert_eq!(list(&replies[0].1), ["new", "b"]);
    }

    #[test]
    fn invalid_arguments_are_refused() {
        /// Address, secret, rank, size, entry, timeout.
        type Case = (&'static str, &'static [u8], usize, usize, String, Duration);
        let second = Duration::from_secs(1);
        let cases: [Case; 7] = [
            ("h:1", b"s", 0, 0, String::new(), second),
            ("h:1", b"s", 2, 2, String::new(), second),
            ("nocolon", b"s", 0, 1, String::new(), second),
            ("h:0", b"s", 0, 1, String::new(), second),
            ("h:1", b"s", 0, 1, "x".repeat(MAX_ENTRY_LEN + 1), second),
            ("h:1", b"s", 0, 1, String::new(), Duration::ZERO),
            ("h:1", b"", 0, 1, String::new(), second),
        ];
        for (address, secret, rank, size, entry, timeout) in cases {
            let err =
                exchange_entries(address, secret, rank, size, 0, &entry, timeout).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{address}: {err}");
        }
        let err = exchange_entries("h:1", b"s", 0, 1, 0, &"x".repeat(70_000), second).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid argument: the entry of rank 0 is 70000 bytes, more than the 65536 the rendezvous service accepts"
        );
        for (secret, size) in [(&b""[..], 1), (b"s", 0)] {
            let err = RendezvousService::start("127.0.0.1:0", secret, size).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        }
        let err = RendezvousService::start("not an address", b"s", 1).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }

    #[test]
    fn service_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<RendezvousService>();
    }
}

/// Property tests: frames, requests and replies come straight off sockets.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::io::Cursor;

    /// A reader that remembers the largest buffer it was offered: a
    /// decoder that sizes its buffer by a length prefix shows here.
    struct Watched<'a> {
        inner: Cursor<&'a [u8]>,
        largest: usize,
    }

    impl Read for Watched<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.largest = self.largest.max(buf.len());
            self.inner.read(buf)
        }
    }

    /// Decoder errors are one of these, each naming what was wrong.
    fn is_named(error: &str) -> bool {
        [
            "has no attempt number",
            "more than the",
            "is not UTF-8",
            "an empty reply",
            "unknown reply status",
            "inside a length",
            "entries for a job of",
            "cannot fit in the",
            "overruns the reply",
            "bytes after the last entry",
        ]
        .iter()
        .any(|named| error.contains(named))
    }

    fn entry() -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<char>(), 0..24).prop_map(|c| c.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_frame_bytes_are_read_or_refused(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            max in 0usize..80,
        ) {
            match read_frame(&mut Cursor::new(&bytes[..]), max) {
                Ok(payload) => {
                    prop_assert!(payload.len() <= max);
                    prop_assert_eq!(&bytes[4..4 + payload.len()], &payload[..]);
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    prop_assert!(e.to_string().contains("expected"), "{}", e);
                }
                Err(e) => prop_assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            }
        }

        #[test]
        fn a_huge_length_prefix_allocates_nothing(
            len in prop_oneof![Just(u32::MAX), any::<u32>()],
            tail in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let mut frame = len.to_le_bytes().to_vec();
            frame.extend_from_slice(&tail);
            let mut reader = Watched { inner: Cursor::new(&frame[..]), largest: 0 };
            let result = read_frame(&mut reader, usize::MAX);
            if (len as usize) > tail.len() {
                let err = result.unwrap_err();
                prop_assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
                let named = format!("of its {len} bytes");
                prop_assert!(err.to_string().contains(&named), "{}", err);
            }
            prop_assert!(reader.largest <= 64 * 1024, "offered {} bytes", reader.largest);
        }

        #[test]
        fn any_request_decodes_or_is_named(payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            match decode_request(&payload) {
                Ok((attempt, entry)) => {
                    prop_assert_eq!(encode_request(attempt, &entry)[4..].to_vec(), payload);
                }
                Err(error) => prop_assert!(is_named(&error), "{}", error),
            }
        }

        #[test]
        fn requests_round_trip_and_truncations_fail(attempt in any::<u32>(), entry in entry()) {
            let frame = encode_request(attempt, &entry);
            let payload = read_frame(&mut Cursor::new(&frame[..]), MAX_REQUEST_LEN).unwrap();
            prop_assert_eq!(decode_request(&payload), Ok((attempt, entry)));
            for cut in 0..frame.len() {
                let err = read_frame(&mut Cursor::new(&frame[..cut]), MAX_REQUEST_LEN).unwrap_err();
                prop_assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
            }
            for cut in 0..4 {
                prop_assert!(decode_request(&payload[..cut]).is_err());
            }
        }

        #[test]
        fn any_reply_decodes_or_is_named(
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            size in 0usize..6,
            count in prop_oneof![Just(None), Just(Some(u32::MAX)), (0..6u32).prop_map(Some)],
        ) {
            let mut payload = payload;
            // Most replies of interest list entries: give them a plausible count.
            if let (Some(count), Some(status)) = (count, payload.first_mut()) {
                *status = ENTRIES;
                payload.splice(1..1.min(payload.len()), count.to_le_bytes());
            }
            match decode_reply(&payload, size) {
                Ok(Reply::Entries(entries)) => prop_assert_eq!(entries.len(), size),
                Ok(_) => prop_assert!(payload[0] == REFUSED || payload[0] == SUPERSEDED),
                Err(error) => prop_assert!(is_named(&error), "{}", error),
            }
        }

        #[test]
        fn a_huge_entry_count_reserves_nothing(
            size in prop_oneof![Just(u32::MAX as usize), 17usize..=u32::MAX as usize],
            rest in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut payload = vec![ENTRIES];
            payload.extend_from_slice(&(size as u32).to_le_bytes());
            payload.extend_from_slice(&rest);
            let error = decode_reply(&payload, size).unwrap_err();
            prop_assert!(error.contains("cannot fit in the"), "{}", error);
        }

        #[test]
        fn replies_round_trip_and_truncations_fail(
            entries in proptest::collection::vec(entry(), 0..6),
        ) {
            let frame = encode_entries(&entries).unwrap();
            let max = max_reply_len(entries.len());
            let payload = read_frame(&mut Cursor::new(&frame[..]), max).unwrap();
            prop_assert_eq!(decode_reply(&payload, entries.len()), Ok(Reply::Entries(entries.clone())));
            for cut in 0..payload.len() {
                let error = decode_reply(&payload[..cut], entries.len()).unwrap_err();
                prop_assert!(is_named(&error), "{}", error);
            }
            for cut in 0..frame.len() {
                prop_assert!(read_frame(&mut Cursor::new(&frame[..cut]), max).is_err());
            }
        }

        #[test]
        fn messages_round_trip(status in prop_oneof![Just(REFUSED), Just(SUPERSEDED)], text in entry()) {
            let payload = read_frame(&mut Cursor::new(&encode_message(status, &text)[..]), usize::MAX).unwrap();
            let expected = if status == REFUSED { Reply::Refused(text) } else { Reply::Superseded(text) };
            prop_assert_eq!(decode_reply(&payload, 3), Ok(expected));
        }
    }
}
