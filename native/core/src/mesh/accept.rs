//! The acceptor: a thread that takes peers' dials on this rank's listener
//! for as long as its communicator lives, since a peer may open its link to
//! this rank at any collective.
//!
//! Invariant, as at join: nothing a connection does ends the acceptor.
//! Garbage, silence (bounded by the connect timeout), another protocol
//! version and a wrong proof each drop that one connection, counted for the
//! timeout messages of [`super::pairs`]; an authenticated peer that was
//! given another job fails this rank's later claims, naming it. Each
//! handshake runs on a short-lived thread of its own, so a silent
//! connection does not hold up a genuine one; past [`MAX_HANDSHAKES`] at
//! once, connections are dropped, and the acceptor itself never waits on
//! a connection, so stopping it is prompt.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use log::{debug, warn};

use super::job::{prepare, remaining, Job};
use super::pairs::{Admission, Pairs};
use crate::doorbell::Doorbell;
use crate::error::{Error, Result};
use crate::handshake;
use crate::link::Link;
use crate::net::ACCEPT_RETRY_PAUSE;
use crate::wire::{ACK, DECLINE, KIND_RANK};

/// Handshakes in progress at once, at most, each on a thread of its own;
/// connections beyond are dropped.
pub(crate) const MAX_HANDSHAKES: usize = 16;

/// Longest pause between accepts while accepting keeps failing.
const MAX_ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// The acceptor's thread, stopped when dropped.
pub(crate) struct Acceptor {
    stopping: Arc<AtomicBool>,
    doorbell: Arc<Doorbell>,
    in_flight: Arc<InFlight>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Connections in their handshake, by id: shut down when the acceptor
/// stops, so their threads end at once.
#[derive(Default)]
struct InFlight(Mutex<HashMap<u64, TcpStream>>);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn shut_down(&self) {
        for stream in self.lock().values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Acceptor {
    /// Starts taking dials on `listener` for the rank `job` describes.
    pub(crate) fn start(
        listener: TcpListener,
        job: Arc<Job>,
        pairs: Arc<Pairs>,
    ) -> Result<Acceptor> {
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("making the listener non-blocking", e))?;
        let doorbell = Arc::new(
            Doorbell::new().map_err(|e| Error::io("creating the acceptor's doorbell", e))?,
        );
        let stopping = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(InFlight::default());
        let thread = {
            let (doorbell, stopping, in_flight) = (
                Arc::clone(&doorbell),
                Arc::clone(&stopping),
                Arc::clone(&in_flight),
            );
            thread::Builder::new()
                .name("hvd-accept".into())
                .spawn(move || {
                    accept_loop(&listener, &job, &pairs, &doorbell, &stopping, &in_flight)
                })
                .map_err(|e| Error::io("spawning the accept thread", e))?
        };
        Ok(Acceptor {
            stopping,
            doorbell,
            in_flight,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops taking dials and waits for the thread; the listener closes, so
    /// later dials are refused, and the handshakes in progress end at once.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.in_flight.shut_down();
        self.doorbell.ring();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: &TcpListener,
    job: &Arc<Job>,
    pairs: &Arc<Pairs>,
    doorbell: &Doorbell,
    stopping: &AtomicBool,
    in_flight: &Arc<InFlight>,
) {
    let mut next_id = 0u64;
    let mut pause = ACCEPT_RETRY_PAUSE;
    while !stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, from)) => {
                pause = ACCEPT_RETRY_PAUSE;
                debug!("rank {}: connection from {from}", job.rank);
                let id = next_id;
                next_id += 1;
                // Without a clone the handshake could not be ended when the
                // acceptor stops; past the limit, a flood of silent
                // connections would hold the genuine dials up.
                let admitted = in_flight.lock().len() < MAX_HANDSHAKES
                    && stream
                        .try_clone()
                        .map(|clone| in_flight.lock().insert(id, clone))
                        .is_ok();
                if !admitted {
                    pairs.reject(format!(
                        "connection from {from}: dropped, {MAX_HANDSHAKES} handshakes in progress"
                    ));
                    continue;
                }
                pairs.handshake_started();
                let (shared_job, shared_pairs, shared_in_flight) =
                    (Arc::clone(job), Arc::clone(pairs), Arc::clone(in_flight));
                let spawned =
                    thread::Builder::new()
                        .name("hvd-handshake".into())
                        .spawn(move || {
                            take_dial(stream, from, &shared_job, &shared_pairs);
                            shared_in_flight.lock().remove(&id);
                            shared_pairs.handshake_ended();
                        });
                if let Err(e) = spawned {
                    warn!("rank {}: dropping connection from {from}: {e}", job.rank);
                    in_flight.lock().remove(&id);
                    pairs.handshake_ended();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Err(e) = doorbell.wait(listener, None) {
                    warn!("rank {}: waiting for connections failed: {e}", job.rank);
                    thread::sleep(ACCEPT_RETRY_PAUSE);
                }
            }
            Err(e) => {
                // E.g. out of descriptors, or a connection reset before it
                // was accepted: genuine peers can still come. The listener
                // stays readable, so back off while it keeps failing.
                pairs.reject(format!("accept failed: {e}"));
                thread::sleep(pause);
                pause = (pause * 2).min(MAX_ACCEPT_PAUSE);
            }
        }
    }
    in_flight.shut_down();
    // Stop listening even where a forked child (a data loader's worker)
    // holds a copy of the descriptor: later dials are refused, not queued.
    // SAFETY: the listener's descriptor is open while it is borrowed.
    unsafe {
        libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR);
    }
}

/// The acceptor's side of the handshake with whoever dialled, then the
/// pair's rule: admit the peer's link or decline it.
fn take_dial(stream: TcpStream, from: SocketAddr, job: &Job, pairs: &Pairs) {
    let deadline = Instant::now() + job.connect_timeout;
    let reject = |what: String| pairs.reject(format!("connection from {from}: {what}"));
    let io = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "no complete handshake before the deadline".to_string()
        }
        io::ErrorKind::UnexpectedEof => "closed during the handshake".to_string(),
        _ => format!("handshake failed: {e}"),
    };
    if let Err(e) = prepare(&stream, deadline) {
        return reject(io(e));
    }
    let ours = match job.hello() {
        Ok(hello) => hello,
        Err(e) => return reject(e.to_string()),
    };
    let hello = match handshake::accept(&stream, &job.secret, &ours, KIND_RANK, io) {
        Ok(hello) => hello,
        Err(why) => return reject(why),
    };
    let peer = match job.check_peer(&hello, None) {
        Ok(peer) => peer,
        Err(error) => {
            warn!("rank {}: {error}", job.rank);
            return pairs.disagree(error);
        }
    };
    // Step 4: admit the rank, or decline it.
    let admission = pairs.admit(peer);
    let answer = match admission {
        Admission::Admit => ACK,
        Admission::Decline => DECLINE,
        // Closed: the connector sees the connection end, a lost peer.
        Admission::Refuse => return,
    };
    let answered = (&stream).write_all(&[answer]).map_err(io);
    if admission == Admission::Decline {
        return;
    }
    let link = answered.and_then(|()| {
        // The TLS handshake, if any, within the dial's deadline too.
        let mut link = Link::new(peer, stream, remaining(deadline)).map_err(|e| e.to_string())?;
        if let Some(credentials) = &job.credentials {
            link = link.encrypt(credentials, true).map_err(|e| e.to_string())?;
        }
        link.with_io_timeout(job.io_timeout)
            .map_err(|e| e.to_string())
    });
    debug!("rank {}: admitted rank {peer}: {}", job.rank, link.is_ok());
    pairs.arrived(peer, link);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Secret;
    use std::time::Duration;

    fn job(connect_timeout: Duration) -> Arc<Job> {
        Arc::new(Job {
            rank: 0,
            size: 2,
            secret: Secret::new(b"secret").unwrap(),
            credentials: None,
            connect_timeout,
            io_timeout: connect_timeout,
        })
    }

    #[test]
    fn a_stopped_acceptor_refuses_dials_though_a_copy_of_its_listener_lives() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // As a forked data-loader worker holds it.
        let copy = listener.try_clone().unwrap();
        let job = job(Duration::from_secs(5));
        let acceptor = Acceptor::start(listener, job, Arc::new(Pairs::new(0, 2))).unwrap();
        acceptor.stop();
        let refused = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        drop(copy);
    }

    #[test]
    fn silent_connections_neither_hold_up_stopping_nor_pile_up() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pairs = Arc::new(Pairs::new(0, 2));
        // Silent connections would each hold a handshake for a minute.
        let acceptor =
            Acceptor::start(listener, job(Duration::from_secs(60)), Arc::clone(&pairs)).unwrap();
        let silent: Vec<TcpStream> = (0..MAX_HANDSHAKES + 4)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while acceptor.in_flight.lock().len() < MAX_HANDSHAKES && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(acceptor.in_flight.lock().len(), MAX_HANDSHAKES);
        // Stopping ends the handshakes in progress: far sooner than their
        // minute.
        let started = Instant::now();
        acceptor.stop();
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
        drop(silent);
    }
}
