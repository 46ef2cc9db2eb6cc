//! The driver's side: the service that gathers the ranks' entries.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use log::{debug, warn};

use crate::auth::{self, Secret};
use crate::doorbell::Doorbell;
use crate::error::{Error, Result};
use crate::handshake;
use crate::net::{self, ACCEPT_RETRY_PAUSE};
use crate::wire::{Hello, KIND_SERVICE, KIND_SERVICE_CLIENT};

use super::frames::*;

/// Timeout of each read and write of the service on a connection: a client
/// silent for this long during the handshake, or not reading its reply, is
/// dropped.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Most threads taking handshakes at once. A registered connection waits for
/// its reply without a thread, so the service's threads do not grow with the
/// job; a silent stranger holds one of these for `CONNECTION_TIMEOUT` at most.
const HANDSHAKE_THREADS: usize = 16;

/// The driver's rendezvous service for a job of `size` ranks.
///
/// Accepts connections on a background thread; up to `HANDSHAKE_THREADS`
/// threads take their handshakes and registrations, and the registration that
/// completes an attempt's list answers every rank of it. Dropping it stops
/// accepting and closes every open connection, so ranks still waiting fail
/// with [`Error::ServiceLost`].
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
        // Its hello carries rank 0 and the job size.
        handshake::check_rank(0, size)?;
        let (listener, port) = net::bind(bind_addr, "the rendezvous service")?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("making the rendezvous service's listener non-blocking", e))?;
        let doorbell = Doorbell::new()
            .map_err(|e| Error::io("creating the rendezvous service's doorbell", e))?;
        let shared = Arc::new(Shared {
            size,
            secret,
            stopping: AtomicBool::new(false),
            doorbell,
            state: Mutex::new(State {
                stopped: false,
                next_id: 0,
                open: HashMap::new(),
                rounds: Rounds::new(size),
                waiting: HashMap::new(),
                arrived: VecDeque::new(),
                handshakers: 0,
                idle_handshakers: 0,
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

    /// Registered connections waiting for their reply, and handshake threads
    /// started: what a test of the service's threads reads.
    #[cfg(test)]
    pub(super) fn waiting_and_threads(&self) -> (usize, usize) {
        let state = self.shared.lock();
        (state.waiting.len(), state.handshakers)
    }
}

impl Drop for RendezvousService {
    /// Stops accepting and shuts every open connection down. Waits only for
    /// the accept thread, which the doorbell wakes at once; handshake
    /// threads end on their own once their sockets are shut down.
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.doorbell.ring();
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

/// What the accept thread and the handshake threads share.
struct Shared {
    size: usize,
    secret: Secret,
    /// Set when the service is dropped; read by the accept thread, which
    /// the doorbell then wakes.
    stopping: AtomicBool,
    doorbell: Doorbell,
    state: Mutex<State>,
    /// Signalled when a connection arrives or the service stops.
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
    /// The registered connections waiting for their reply, by id.
    waiting: HashMap<u64, Waiting>,
    /// Accepted connections no handshake thread has taken yet.
    arrived: VecDeque<Arrived>,
    /// Handshake threads running, and how many of them wait for a connection.
    handshakers: usize,
    idle_handshakers: usize,
}

/// A connection as accepted.
struct Arrived {
    id: u64,
    stream: TcpStream,
    from: SocketAddr,
}

/// A registered connection, parked until its attempt's list is complete.
struct Waiting {
    stream: TcpStream,
    from: SocketAddr,
    rank: usize,
    attempt: u32,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parks `stream`, which made `registration`, and records the
    /// registration. Returns the connections to answer now, each with its
    /// reply (none if the service stopped).
    fn register(
        &self,
        id: u64,
        stream: TcpStream,
        from: SocketAddr,
        registration: Registration,
    ) -> Vec<(Waiting, Arc<Vec<u8>>)> {
        let mut state = self.lock();
        if state.stopped {
            return Vec::new();
        }
        let Registration {
            attempt,
            rank,
            entry,
        } = registration;
        let waiting = Waiting {
            stream,
            from,
            rank,
            attempt,
        };
        state.waiting.insert(id, waiting);
        let replies = state.rounds.register(id, attempt, rank, entry);
        replies
            .into_iter()
            .filter_map(|(id, reply)| {
                state.open.remove(&id);
                state.waiting.remove(&id).map(|waiting| (waiting, reply))
            })
            .collect()
    }

    /// The next accepted connection to take the handshake of; None once the
    /// service stopped.
    fn next_arrived(&self) -> Option<Arrived> {
        let mut state = self.lock();
        loop {
            if state.stopped {
                return None;
            }
            if let Some(arrived) = state.arrived.pop_front() {
                return Some(arrived);
            }
            state.idle_handshakers += 1;
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.idle_handshakers -= 1;
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, from)) => hand_over(stream, from, shared),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Err(e) = shared.doorbell.wait(listener, None) {
                    warn!("rendezvous service: waiting for connections failed: {e}");
                    thread::sleep(ACCEPT_RETRY_PAUSE);
                }
            }
            Err(e) => {
                // E.g. out of descriptors or a connection reset before
                // accept: not fatal, genuine ranks can still come.
                warn!("rendezvous service: accept failed: {e}");
                thread::sleep(ACCEPT_RETRY_PAUSE);
            }
        }
    }
}

/// Tracks `stream` and queues it for a handshake thread, starting one if
/// none is idle and fewer than `HANDSHAKE_THREADS` run.
fn hand_over(stream: TcpStream, from: SocketAddr, shared: &Arc<Shared>) {
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
    let mut state = shared.lock();
    if state.stopped {
        return;
    }
    let id = state.next_id;
    state.next_id += 1;
    state.open.insert(id, clone);
    state.arrived.push_back(Arrived { id, stream, from });
    shared.changed.notify_one();
    // An idle thread may have been woken already for an earlier arrival.
    if state.arrived.len() <= state.idle_handshakers || state.handshakers >= HANDSHAKE_THREADS {
        return;
    }
    let spawned = thread::Builder::new().name("hvd-rdzv-conn".into()).spawn({
        let shared = Arc::clone(shared);
        move || {
            while let Some(arrived) = shared.next_arrived() {
                serve(&shared, arrived);
            }
        }
    });
    match spawned {
        Ok(_) => state.handshakers += 1,
        // The running ones take it; with none, it waits for the next arrival.
        Err(e) => warn!("rendezvous service: cannot start a handshake thread: {e}"),
    }
}

/// Serves one connection: handshake and registration; then, if it completed
/// its attempt's list, the replies to every connection of the attempt.
fn serve(shared: &Shared, arrived: Arrived) {
    let Arrived { id, stream, from } = arrived;
    let registration = match admit(&stream, shared) {
        Ok(registration) => registration,
        Err(reason) => {
            warn!("rendezvous service: rejected connection from {from}: {reason}");
            shared.lock().open.remove(&id);
            return;
        }
    };
    let (rank, attempt) = (registration.rank, registration.attempt);
    debug!("rendezvous service: rank {rank} of stage attempt {attempt} registered from {from}");
    for (waiting, reply) in shared.register(id, stream, from, registration) {
        let Waiting {
            stream,
            from,
            rank,
            attempt,
        } = waiting;
        if let Err(e) = (&stream).write_all(&reply) {
            warn!("rendezvous service: cannot answer rank {rank} of stage attempt {attempt} at {from}: {e}");
        }
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
    // The size fits in u32: `start` checked it.
    let nonce = auth::nonce().map_err(|e| e.to_string())?;
    let ours = Hello::of_kind(KIND_SERVICE, 0, shared.size as u32, nonce);
    let hello = handshake::accept(stream, &shared.secret, &ours, KIND_SERVICE_CLIENT, io)?;
    let mut stream = stream;

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

/// The registrations of the stage attempts still gathering entries.
pub(super) struct Rounds {
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
    pub(super) fn new(size: usize) -> Rounds {
        Rounds {
            size,
            gathering: HashMap::new(),
        }
    }

    /// Records `entry` for `rank` (below the size) of `attempt`, registered
    /// on connection `id`. Returns the connections to answer now, each with
    /// its encoded reply: a registration this one replaced, and every rank of
    /// the attempt when this was its last missing rank.
    pub(super) fn register(
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
    pub(super) fn missing(&self) -> Vec<(u32, Vec<usize>)> {
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
