//! The state of this rank's connection to each peer, shared by the thread
//! that runs the collectives (it opens a link when it first needs one) and
//! the acceptor (it takes the links peers open), and the rule that settles
//! two dials that cross.
//!
//! A pair goes `Idle` → `Dialling` → `Taken` when this rank dials and the
//! peer admits it, and `Idle` → `Arriving` → `Arrived` → `Taken` when the
//! peer dials first. Two ranks may dial each other at once: each acceptor
//! then sees a dial while its own rank is `Dialling`, and the higher rank's
//! dial wins (the lower rank admits it; the higher declines the lower's, and
//! the lower then waits, `Awaiting`, for the dial it admitted, dialling
//! again each [`REDIAL`] in case that dial failed or the peer ended). The state
//! changes under one lock, so exactly one of the two connections survives.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use log::{debug, warn};

use crate::error::{Error, Result};
use crate::link::Link;

enum Pair {
    Idle,
    /// This rank is dialling the peer.
    Dialling,
    /// The peer declined this rank's dial, since: its own dial is on the
    /// way.
    Awaiting(Instant),
    /// The acceptor admitted the peer's dial and is finishing it.
    Arriving,
    /// The peer's dial, admitted, until this rank first needs it.
    Arrived(Link),
    /// In use.
    Taken,
}

/// What the acceptor answers an authenticated dial from a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    Admit,
    /// This rank's own dial to the peer wins, or the pair is in use.
    Decline,
    /// This rank is closed: no answer, the connection ends.
    Refuse,
}

/// What the thread that needs a link to a peer does next.
pub(crate) enum Claim {
    /// The link the peer opened.
    Ready(Link),
    /// Dial it: this rank now holds the pair in `Dialling`.
    Dial,
}

/// How long a rank declined in favour of the peer's crossing dial waits
/// for it before it dials again.
const REDIAL: Duration = Duration::from_secs(1);

pub(crate) struct Pairs {
    rank: usize,
    table: Mutex<Table>,
    changed: Condvar,
}

struct Table {
    peers: Vec<Pair>,
    /// Connections dropped before they proved to be a rank of this job: how
    /// many, and why the last one was, for a timeout's message.
    rejected: usize,
    last_rejection: String,
    /// A peer that proved to be of this job but was given another one
    /// (size, byte order, encryption): every later claim fails with it.
    disagreement: Option<(usize, String)>,
    /// Links made from now on poll before they sleep (`Link::busy_polling`).
    busy_polling: bool,
    /// The communicator closed: no more links.
    closed: bool,
    /// Dials the acceptor is still handshaking.
    handshakes: usize,
}

impl Pairs {
    pub(crate) fn new(rank: usize, size: usize) -> Pairs {
        Pairs {
            rank,
            table: Mutex::new(Table {
                peers: (0..size).map(|_| Pair::Idle).collect(),
                rejected: 0,
                last_rejection: String::new(),
                disagreement: None,
                busy_polling: false,
                closed: false,
                handshakes: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The acceptor's answer to an authenticated dial from `peer`.
    pub(crate) fn admit(&self, peer: usize) -> Admission {
        let mut table = self.lock();
        if table.closed {
            return Admission::Refuse;
        }
        let admit = match table.peers[peer] {
            Pair::Idle | Pair::Awaiting(_) => true,
            // Crossing dials: the higher rank's wins.
            Pair::Dialling => peer > self.rank,
            // The peer's dial crossed this rank's admitted one, or it dialled
            // again (`REDIAL`), after the link between the two was under
            // way: that link stands, and the peer takes it (not a fault).
            Pair::Arriving | Pair::Arrived(_) | Pair::Taken => {
                debug!(
                    "rank {}: declined a second connection from rank {peer}",
                    self.rank
                );
                false
            }
        };
        if !admit {
            return Admission::Decline;
        }
        table.peers[peer] = Pair::Arriving;
        Admission::Admit
    }

    /// The admitted dial from `peer` is ready as `link`, or failed for
    /// `reason` after it was admitted.
    pub(crate) fn arrived(&self, peer: usize, link: std::result::Result<Link, String>) {
        let mut table = self.lock();
        match link {
            Ok(link) if !table.closed => table.peers[peer] = Pair::Arrived(link),
            Ok(link) => link.shutdown(),
            Err(reason) => {
                table.peers[peer] = Pair::Idle;
                table.reject(format!("rank {peer}'s connection, admitted: {reason}"));
            }
        }
        self.changed.notify_all();
    }

    /// The acceptor starts handshaking a dial.
    pub(crate) fn handshake_started(&self) {
        self.lock().handshakes += 1;
    }

    /// The acceptor has dealt with a dial, whatever came of it.
    pub(crate) fn handshake_ended(&self) {
        self.lock().handshakes -= 1;
        self.changed.notify_all();
    }

    /// Waits, for at most `settle`, until the acceptor has dealt with the
    /// dials in its hands (or found a peer that disagrees): what they bring
    /// may explain why this rank's dial failed.
    pub(crate) fn settle(&self, settle: Duration) {
        let until = Instant::now() + settle;
        let mut table = self.lock();
        while table.handshakes > 0 && table.disagreement.is_none() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            table = self
                .changed
                .wait_timeout(table, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// `error`, which ended this rank's dial to a peer, as the acceptor's
    /// side explains it (after [`Pairs::settle`]): a peer that disagrees
    /// about the job is the error, and a timeout or a lost peer mentions the
    /// rejected dials. Two ranks dial each other at join, and the one that
    /// found the fault first may end before it answered the other's dial.
    pub(crate) fn explain(&self, error: Error) -> Error {
        let table = self.lock();
        if let Some((rank, detail)) = &table.disagreement {
            return Error::Mismatch {
                rank: *rank,
                detail: detail.clone(),
            };
        }
        match error {
            Error::Timeout { what, rank } => Error::Timeout {
                what: table.with_rejections(what),
                rank,
            },
            Error::PeerLost { rank, context } => Error::PeerLost {
                rank,
                context: table.with_rejections(context),
            },
            other => other,
        }
    }

    /// A connection dropped before it proved to be a rank of this job.
    pub(crate) fn reject(&self, reason: String) {
        warn!("rank {}: rejected {reason}", self.rank);
        self.lock().reject(reason);
    }

    /// An authenticated peer disagrees about the job: every rank's claims
    /// fail from now on, naming it.
    pub(crate) fn disagree(&self, error: Error) {
        let mut table = self.lock();
        if table.disagreement.is_none() {
            table.disagreement = Some(match error {
                Error::Mismatch { rank, detail } => (rank, detail),
                other => (self.rank, other.to_string()),
            });
        }
        self.changed.notify_all();
    }

    /// The next step towards a link to `peer`, waiting until `deadline` while
    /// a dial between the two is under way.
    pub(crate) fn claim(&self, peer: usize, deadline: Instant) -> Result<Claim> {
        let mut table = self.lock();
        loop {
            if let Some((rank, detail)) = &table.disagreement {
                return Err(Error::Mismatch {
                    rank: *rank,
                    detail: detail.clone(),
                });
            }
            if table.closed {
                return Err(Error::Unusable {
                    cause: "the communicator is closed".into(),
                });
            }
            let waiting = match std::mem::replace(&mut table.peers[peer], Pair::Taken) {
                Pair::Arrived(link) => return Ok(Claim::Ready(link)),
                Pair::Idle => {
                    table.peers[peer] = Pair::Dialling;
                    return Ok(Claim::Dial);
                }
                Pair::Taken => {
                    return Err(Error::Unusable {
                        cause: format!("rank {} took its link to rank {peer} twice", self.rank),
                    })
                }
                other => other,
            };
            let now = Instant::now();
            let declined_at = match waiting {
                Pair::Awaiting(at) => Some(at),
                _ => None,
            };
            if declined_at.is_some_and(|at| now >= at + REDIAL) && now < deadline {
                // The peer's dial is long in coming: if it failed, or the
                // peer ended, a new dial learns so (admitted, or refused).
                table.peers[peer] = Pair::Dialling;
                return Ok(Claim::Dial);
            }
            let declined = declined_at.is_some();
            table.peers[peer] = waiting;
            if now >= deadline {
                let what = if declined {
                    format!(
                        "rank {peer} declined this rank's connection as it was connecting itself, \
                         but its connection did not arrive"
                    )
                } else {
                    format!("waiting for rank {peer}'s connection")
                };
                return Err(Error::Timeout {
                    what: table.with_rejections(what),
                    rank: Some(peer),
                });
            }
            let until = declined_at.map_or(deadline, |at| deadline.min(at + REDIAL));
            table = self
                .changed
                .wait_timeout(table, until.saturating_duration_since(now))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Ends this rank's dial to `peer`: `Some(link)` if the peer admitted
    /// it, `None` if it declined (its own dial wins), or the dial failed.
    pub(crate) fn dialled(&self, peer: usize, outcome: &Result<Option<Link>>) {
        let mut table = self.lock();
        if matches!(table.peers[peer], Pair::Dialling) {
            table.peers[peer] = match outcome {
                Ok(Some(_)) => Pair::Taken,
                Ok(None) => Pair::Awaiting(Instant::now()),
                Err(_) => Pair::Idle,
            };
        }
        self.changed.notify_all();
    }

    /// Whether `peer`'s own dial, admitted, has made this rank's dial to it
    /// moot (while the peer was not answering this one yet).
    pub(crate) fn superseded(&self, peer: usize) -> bool {
        matches!(self.lock().peers[peer], Pair::Arriving | Pair::Arrived(_))
    }

    /// `link` as this rank's links are made now (busy polling or not), for
    /// a link taken from the table or dialled: one that arrived before
    /// [`Pairs::poll_busily`] is taken after it.
    pub(crate) fn fitted(&self, link: Link) -> Link {
        if self.lock().busy_polling {
            link.busy_polling()
        } else {
            link
        }
    }

    /// Links made from now on poll before they sleep.
    pub(crate) fn poll_busily(&self) {
        self.lock().busy_polling = true;
    }

    /// No more links: admitted ones not taken yet are shut down, later dials
    /// declined, waiting claims fail.
    pub(crate) fn close(&self) {
        let mut table = self.lock();
        table.closed = true;
        for pair in &table.peers {
            if let Pair::Arrived(link) = pair {
                link.shutdown();
            }
        }
        self.changed.notify_all();
    }
}

impl Table {
    fn reject(&mut self, reason: String) {
        self.rejected += 1;
        self.last_rejection = reason;
    }

    fn with_rejections(&self, mut what: String) -> String {
        if self.rejected > 0 {
            what.push_str(&format!(
                " ({} connection attempt(s) rejected, the last: {})",
                self.rejected, self.last_rejection
            ));
        }
        what
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossing_dials_keep_the_higher_ranks_and_nothing_is_admitted_twice() {
        let pairs = Pairs::new(2, 5);
        let far = Instant::now() + Duration::from_secs(5);
        // Nobody dialled yet: admitted.
        assert_eq!(pairs.admit(4), Admission::Admit);
        // A second dial from the same rank: declined.
        assert_eq!(pairs.admit(4), Admission::Decline);
        // This rank dials 3 and 0; both dial it back at the same time.
        for peer in [3, 0] {
            assert!(matches!(pairs.claim(peer, far).unwrap(), Claim::Dial));
        }
        assert_eq!(
            pairs.admit(3),
            Admission::Admit,
            "the higher rank's dial wins"
        );
        assert_eq!(pairs.admit(0), Admission::Decline, "this rank's dial wins");
        assert!(pairs.superseded(3) && !pairs.superseded(0));
        // Rank 3 declines this rank's dial; rank 0 admits it.
        pairs.dialled(3, &Ok(None));
        pairs.dialled(0, &Ok(Some(link_to(0))));
        assert_eq!(pairs.admit(0), Admission::Decline, "in use");
        // The claim waits for rank 3's admitted dial, then takes it.
        pairs.arrived(3, Ok(link_to(3)));
        assert!(matches!(pairs.claim(3, far).unwrap(), Claim::Ready(link) if link.rank() == 3));
        // Closed: dials get no answer at all (a lost peer to the dialler).
        pairs.close();
        assert_eq!(pairs.admit(1), Admission::Refuse);
    }

    #[test]
    fn a_declined_dial_whose_crossing_dial_never_comes_times_out_naming_the_peer() {
        let pairs = Pairs::new(0, 2);
        assert!(matches!(
            pairs.claim(1, Instant::now()).unwrap(),
            Claim::Dial
        ));
        pairs.dialled(1, &Ok(None));
        pairs.reject("connection from 10.0.0.9:5: not a horovod-rs hello".into());
        let err = match pairs.claim(1, Instant::now() + Duration::from_millis(50)) {
            Err(err) => err,
            Ok(_) => panic!("no link arrived"),
        };
        assert!(matches!(err, Error::Timeout { rank: Some(1), .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("rank 1 declined"), "{message}");
        assert!(
            message.contains("1 connection attempt(s) rejected"),
            "{message}"
        );
    }

    #[test]
    fn a_declined_rank_dials_again_when_the_crossing_dial_is_long_in_coming() {
        let pairs = Pairs::new(0, 2);
        let far = Instant::now() + Duration::from_secs(30);
        assert!(matches!(pairs.claim(1, far).unwrap(), Claim::Dial));
        pairs.dialled(1, &Ok(None));
        let started = Instant::now();
        assert!(matches!(pairs.claim(1, far).unwrap(), Claim::Dial));
        let waited = started.elapsed();
        assert!(waited >= REDIAL && waited < 10 * REDIAL, "{waited:?}");
    }

    #[test]
    fn a_peer_given_another_job_fails_every_claim() {
        let pairs = Pairs::new(0, 3);
        pairs.disagree(Error::Mismatch {
            rank: 2,
            detail: "it was given 4 ranks, this rank 3".into(),
        });
        let err = match pairs.claim(1, Instant::now()) {
            Err(err) => err,
            Ok(_) => panic!("claimed despite the disagreement"),
        };
        assert!(matches!(err, Error::Mismatch { rank: 2, .. }), "{err}");
    }

    fn link_to(rank: usize) -> Link {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        Link::new(rank, stream, Duration::from_secs(1)).unwrap()
    }
}
