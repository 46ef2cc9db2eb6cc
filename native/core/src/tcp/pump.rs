//! Moving bytes on several links at once from one thread, without blocking.
//!
//! Collectives over TCP send to some peers while receiving from others. A
//! thread per send costs a spawn per step and, on hosts with fewer cores
//! than ranks, a context switch per wake-up; instead the caller loops over
//! [`Link::try_send`] and [`Link::try_recv`] and, when neither moved a byte,
//! sleeps in `poll(2)` on exactly the links it still waits for ([`wait`]).
//! [`transfer`] is that loop for fixed buffers, one [`Flow`] per peer.
//!
//! Invariant: no call here blocks on a single link, so no cycle of ranks
//! blocked writing to each other can form, whatever the message sizes; the
//! only sleep is `poll`, bounded by the links' I/O timeout, after which the
//! peer waited for is named in a `Timeout`.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::link::{io_error, Link};
use crate::wire::{check_header, Header, HEADER_LEN};

/// What a loop waits for on one link.
pub(crate) struct Want<'a> {
    pub(crate) link: &'a Link,
    pub(crate) read: bool,
    pub(crate) write: bool,
}

/// Sleeps until one of `wants` can make progress (or has failed: the next
/// try then reports it). Fails with `Timeout` naming the first link waited
/// on for reading (else for writing) when nothing happens for the links'
/// I/O timeout.
pub(crate) fn wait(wants: &[Want<'_>], during: &str) -> Result<()> {
    if wants.iter().any(|w| w.read && w.link.has_plaintext()) {
        return Ok(()); // decrypted ahead: poll would not see it
    }
    let mut fds: Vec<libc::pollfd> = wants
        .iter()
        .filter(|w| w.read || w.write)
        .map(|w| libc::pollfd {
            fd: w.link.fd(),
            events: if w.read { libc::POLLIN } else { 0 } | if w.write { libc::POLLOUT } else { 0 },
            revents: 0,
        })
        .collect();
    let Some(first) = wants
        .iter()
        .find(|w| w.read)
        .or_else(|| wants.iter().find(|w| w.write))
    else {
        return Ok(());
    };
    let timeout = first.link.io_timeout();
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY (both polls): `fds` is a valid array of `fds.len()` pollfd
    // structures whose descriptors stay open while the links are borrowed.
    let poll_now = |fds: &mut [libc::pollfd]| unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) > 0
    };
    if first.link.spin(|| poll_now(&mut fds)) {
        return Ok(());
    }
    loop {
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis) };
        match ready {
            0 => return Err(timed_out(first.link, during, timeout)),
            n if n > 0 => return Ok(()),
            _ => {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(Error::io(format!("waiting for peers during {during}"), err));
                }
            }
        }
    }
}

fn timed_out(link: &Link, during: &str, waited: Duration) -> Error {
    io_error(
        std::io::ErrorKind::TimedOut.into(),
        link.rank(),
        during,
        waited,
    )
}

/// The header exchange that opens a collective: this rank's header goes out
/// ahead of its data, and the peer's must arrive (and equal ours) before any
/// of the peer's data is used. Neither side waits for the other's header
/// before sending, which saves a network hop.
pub(crate) struct HeaderSwap<'a> {
    ours: &'a Header,
    out: [u8; HEADER_LEN],
    sent: usize,
    theirs: [u8; HEADER_LEN],
    got: usize,
}

impl<'a> HeaderSwap<'a> {
    pub(crate) fn new(ours: &'a Header) -> HeaderSwap<'a> {
        HeaderSwap {
            ours,
            out: ours.encode(),
            sent: 0,
            theirs: [0; HEADER_LEN],
            got: 0,
        }
    }

    /// Whether all of our header has been sent.
    pub(crate) fn pushed(&self) -> bool {
        self.sent == HEADER_LEN
    }

    /// Whether the peer's whole header has arrived (and matched).
    pub(crate) fn pulled(&self) -> bool {
        self.got == HEADER_LEN
    }

    /// Sends what the socket takes of the rest of our header to `to`;
    /// returns whether any byte went.
    pub(crate) fn push(&mut self, to: &Link, during: &str) -> Result<bool> {
        let n = to.try_send(&self.out[self.sent..], during)?;
        self.sent += n;
        Ok(n > 0)
    }

    /// Reads what has arrived of the peer's header from `from`; returns
    /// whether any byte did. `Mismatch` naming `from` once it is complete
    /// and differs from ours.
    pub(crate) fn pull(&mut self, from: &Link, during: &str) -> Result<bool> {
        let n = from.try_recv(&mut self.theirs[self.got..], during)?;
        self.got += n;
        if n > 0 && self.pulled() {
            check_header(from.rank(), &self.theirs, self.ours)?;
        }
        Ok(n > 0)
    }
}

/// One peer's part of a [`transfer`]: bytes to send to it and a buffer to
/// fill from it, each after the header when the flow opens a collective.
pub(crate) struct Flow<'a> {
    link: &'a Link,
    header: Option<HeaderSwap<'a>>,
    out: &'a [u8],
    sent: usize,
    into: &'a mut [u8],
    got: usize,
}

impl<'a> Flow<'a> {
    /// Sends `out` to `link` while filling `into` from it; with `header`,
    /// both directions start with the header, and the peer's is checked.
    pub(crate) fn new(
        link: &'a Link,
        header: Option<&'a Header>,
        out: &'a [u8],
        into: &'a mut [u8],
    ) -> Flow<'a> {
        Flow {
            link,
            header: header.map(HeaderSwap::new),
            out,
            sent: 0,
            into,
            got: 0,
        }
    }

    fn sending(&self) -> bool {
        self.sent < self.out.len()
            || self.header.as_ref().is_some_and(|h| !h.pushed())
            || !self.link.flushed()
    }

    fn receiving(&self) -> bool {
        self.got < self.into.len() || self.header.as_ref().is_some_and(|h| !h.pulled())
    }

    /// One non-blocking attempt each way; returns whether a byte moved.
    fn step(&mut self, during: &str) -> Result<bool> {
        let mut moved = false;
        let pushed = match self.header.as_mut().filter(|h| !h.pushed()) {
            Some(header) => {
                moved |= header.push(self.link, during)?;
                header.pushed()
            }
            None => true,
        };
        if pushed && self.sent < self.out.len() {
            let n = self.link.try_send(&self.out[self.sent..], during)?;
            self.sent += n;
            moved |= n > 0;
        } else if pushed && !self.link.flushed() {
            moved |= self.link.try_flush(during)?;
        }
        if let Some(header) = self.header.as_mut().filter(|h| !h.pulled()) {
            moved |= header.pull(self.link, during)?;
            if !header.pulled() {
                return Ok(moved);
            }
        }
        if self.got < self.into.len() {
            let n = self.link.try_recv(&mut self.into[self.got..], during)?;
            self.got += n;
            moved |= n > 0;
        }
        Ok(moved)
    }
}

/// Runs every flow to completion, all at once.
pub(crate) fn transfer(flows: &mut [Flow<'_>], during: &str) -> Result<()> {
    loop {
        let mut moved = false;
        for flow in flows.iter_mut() {
            moved |= flow.step(during)?;
        }
        if !moved {
            let wants: Vec<Want<'_>> = flows
                .iter()
                .map(|f| Want {
                    link: f.link,
                    read: f.receiving(),
                    write: f.sending(),
                })
                .collect();
            if wants.iter().all(|w| !w.read && !w.write) {
                return Ok(());
            }
            wait(&wants, during)?;
        }
    }
}
