//! One established connection to one peer rank.
//!
//! A [`Link`] owns the TCP stream to a peer and turns every I/O failure on it
//! into an [`Error`] naming that peer: end-of-stream and resets become
//! `PeerLost`, a read or write that exceeds the I/O timeout becomes `Timeout`.
//! Sends and receives take `&self`, so one thread can send on a link while
//! another receives on it. [`Link::try_send`] and [`Link::try_recv`] never
//! block (the stream stays in blocking mode for everything else), for loops
//! that move data on several links at once ([`crate::tcp::pump`]).
//!
//! An encrypted link ([`Link::encrypt`], [`crate::tls`]) keeps this
//! interface: its TLS state sits behind a lock held only for non-blocking
//! steps, so a sender and a receiver never wait for each other, and its
//! blocking calls wait in `poll(2)` between such steps. Loops of non-blocking
//! calls see two more states: ciphertext still to flush after the bytes
//! were taken ([`Link::flushed`], [`Link::try_flush`]) and decrypted bytes
//! that `poll` cannot see ([`Link::has_plaintext`]).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::spin::SpinBudget;
use crate::tls::{Credentials, Session};
use crate::wire::{check_header, Header, HEADER_LEN};

/// An authenticated connection to peer `rank`.
#[derive(Debug)]
pub(crate) struct Link {
    rank: usize,
    stream: TcpStream,
    io_timeout: Duration,
    /// Set when this host's ranks have a core each: waits for the peer
    /// poll briefly before they sleep ([`crate::spin`]).
    spin: Option<SpinBudget>,
    /// Set when the link is encrypted; shared by its clones.
    tls: Option<Arc<Mutex<Session>>>,
}

impl Link {
    /// Wraps an authenticated stream: blocking, `TCP_NODELAY`, and read and
    /// write timeouts of `io_timeout`.
    pub(crate) fn new(rank: usize, stream: TcpStream, io_timeout: Duration) -> Result<Link> {
        let context = || format!("configuring the connection to rank {rank}");
        stream
            .set_nonblocking(false)
            .map_err(|e| Error::io(context(), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io(context(), e))?;
        Link {
            rank,
            stream,
            io_timeout,
            spin: None,
            tls: None,
        }
        .with_io_timeout(io_timeout)
    }

    /// This link with read and write timeouts of `io_timeout` (one made
    /// with its handshake's deadline, once the handshake is done).
    pub(crate) fn with_io_timeout(mut self, io_timeout: Duration) -> Result<Link> {
        let context = || format!("configuring the connection to rank {}", self.rank);
        self.stream
            .set_read_timeout(Some(io_timeout))
            .map_err(|e| Error::io(context(), e))?;
        self.stream
            .set_write_timeout(Some(io_timeout))
            .map_err(|e| Error::io(context(), e))?;
        self.io_timeout = io_timeout;
        Ok(self)
    }

    /// This link, encrypted: runs the TLS handshake with the peer, as the
    /// server on the side that `accepted` the connection. (Ranks have
    /// agreed on encrypting in their hellos already.)
    pub(crate) fn encrypt(mut self, credentials: &Credentials, accepted: bool) -> Result<Link> {
        let session = credentials
            .handshake(&self.stream, accepted)
            .map_err(|e| io_error(e, self.rank, "the TLS handshake", self.io_timeout))?;
        self.tls = Some(Arc::new(Mutex::new(session)));
        Ok(self)
    }

    /// This link, polling briefly before it sleeps in a wait for the peer.
    pub(crate) fn busy_polling(mut self) -> Link {
        self.spin = Some(SpinBudget::new());
        self
    }

    /// Polls `ready` while this link's spin budget lasts; false at once
    /// when it does not busy-poll.
    pub(crate) fn spin(&self, ready: impl FnMut() -> bool) -> bool {
        self.spin.as_ref().is_some_and(|budget| budget.spin(ready))
    }

    /// The peer's rank.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Sends all of `bytes`.
    pub(crate) fn send(&self, bytes: &[u8], during: &str) -> Result<()> {
        if self.tls.is_some() {
            let mut sent = 0;
            loop {
                let n = self.try_send(&bytes[sent..], during)?;
                sent += n;
                if sent == bytes.len() && self.flushed() {
                    return Ok(());
                }
                if n == 0 && !self.try_flush(during)? {
                    self.poll(libc::POLLOUT, during)?;
                }
            }
        }
        (&self.stream)
            .write_all(bytes)
            .map_err(|e| io_error(e, self.rank, during, self.io_timeout))
    }

    /// Receives the peer's header of a collective and requires it to equal
    /// `ours`: ranks that called different collectives fail with `Mismatch`.
    pub(crate) fn receive_header(&self, ours: &Header, during: &str) -> Result<()> {
        let mut bytes = [0u8; HEADER_LEN];
        self.recv(&mut bytes, during)?;
        check_header(self.rank, &bytes, ours)
    }

    /// Fills `buf` from the peer.
    pub(crate) fn recv(&self, buf: &mut [u8], during: &str) -> Result<()> {
        let mut got = 0;
        if self.tls.is_some() {
            while got < buf.len() {
                let n = self.try_recv(&mut buf[got..], during)?;
                got += n;
                if n == 0 && !self.spin_recv(buf, &mut got, during)? {
                    self.poll(libc::POLLIN, during)?;
                }
            }
            return Ok(());
        }
        if self.spin.is_some() {
            got = self.try_recv(buf, during)?;
            if got < buf.len() {
                self.spin_recv(buf, &mut got, during)?;
            }
        }
        (&self.stream)
            .read_exact(&mut buf[got..])
            .map_err(|e| io_error(e, self.rank, during, self.io_timeout))
    }

    /// Receives into `buf[*got..]` while the spin budget lasts, until it is
    /// full; returns whether it filled (false at once when not busy-polling).
    fn spin_recv(&self, buf: &mut [u8], got: &mut usize, during: &str) -> Result<bool> {
        let mut failed = None;
        let full = self.spin(|| match self.try_recv(&mut buf[*got..], during) {
            Ok(n) => {
                *got += n;
                *got == buf.len()
            }
            Err(error) => {
                failed = Some(error);
                true
            }
        });
        match failed {
            Some(error) => Err(error),
            None => Ok(full),
        }
    }

    /// Sends as much of `bytes` as the socket buffer takes without blocking;
    /// returns how many bytes that was (0 if the buffer is full).
    pub(crate) fn try_send(&self, bytes: &[u8], during: &str) -> Result<usize> {
        if let Some(mut tls) = self.session() {
            return tls
                .try_send(self.fd(), bytes)
                .map_err(|e| io_error(e, self.rank, during, self.io_timeout));
        }
        if bytes.is_empty() {
            return Ok(0);
        }
        // SAFETY: the descriptor is open for the life of `self`, and `bytes`
        // is readable for `bytes.len()` bytes.
        let n = unsafe {
            libc::send(
                self.stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        self.nonblocking_result(n, during)
    }

    /// Receives into `buf` what has arrived, without blocking; returns how
    /// many bytes that was (0 if none). End-of-stream is `PeerLost`.
    pub(crate) fn try_recv(&self, buf: &mut [u8], during: &str) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some(mut tls) = self.session() {
            return tls
                .try_recv(self.fd(), buf)
                .map_err(|e| io_error(e, self.rank, during, self.io_timeout));
        }
        // SAFETY: the descriptor is open for the life of `self`, and `buf`
        // is writable for `buf.len()` bytes.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => Err(io_error(
                io::ErrorKind::UnexpectedEof.into(),
                self.rank,
                during,
                self.io_timeout,
            )),
            n => self.nonblocking_result(n, during),
        }
    }

    /// The byte count of a non-blocking `send` or `recv` that returned `n`:
    /// would-block and interrupted calls moved 0 bytes.
    fn nonblocking_result(&self, n: isize, during: &str) -> Result<usize> {
        if let Ok(n) = usize::try_from(n) {
            return Ok(n);
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(io_error(err, self.rank, during, self.io_timeout)),
        }
    }

    /// Whether everything sent has left for the socket (always, unless
    /// encrypted: then ciphertext may wait for [`Link::try_flush`]).
    pub(crate) fn flushed(&self) -> bool {
        self.session().is_none_or(|tls| tls.flushed())
    }

    /// Sends ciphertext still queued, without blocking; returns whether any
    /// went.
    pub(crate) fn try_flush(&self, during: &str) -> Result<bool> {
        match self.session() {
            Some(mut tls) => tls
                .try_flush(self.fd())
                .map_err(|e| io_error(e, self.rank, during, self.io_timeout)),
            None => Ok(false),
        }
    }

    /// Whether bytes are ready to read that `poll` on [`Link::fd`] does not
    /// show (decrypted ahead, on an encrypted link).
    pub(crate) fn has_plaintext(&self) -> bool {
        self.session().is_some_and(|mut tls| tls.has_plaintext())
    }

    fn session(&self) -> Option<MutexGuard<'_, Session>> {
        self.tls
            .as_ref()
            .map(|tls| tls.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sleeps until the socket is ready for `events` (or failed), at most
    /// the I/O timeout, then a `Timeout` naming the peer.
    fn poll(&self, events: libc::c_short, during: &str) -> Result<()> {
        let deadline = Instant::now() + self.io_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io_error(
                    io::ErrorKind::TimedOut.into(),
                    self.rank,
                    during,
                    self.io_timeout,
                ));
            }
            let mut fd = libc::pollfd {
                fd: self.fd(),
                events,
                revents: 0,
            };
            let millis = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
            // SAFETY: one valid pollfd whose descriptor stays open while
            // `self` is borrowed.
            match unsafe { libc::poll(&mut fd, 1, millis) } {
                0 => continue,
                n if n > 0 => return Ok(()),
                _ => {
                    let err = io::Error::last_os_error();
                    if err.kind() != io::ErrorKind::Interrupted {
                        return Err(io_error(err, self.rank, during, self.io_timeout));
                    }
                }
            }
        }
    }

    /// The socket's descriptor, for `poll`.
    pub(crate) fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// How long a single read or write may block.
    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// Copies up to `buf.len()` bytes waiting on the connection into `buf`
    /// without consuming them or blocking; returns how many there were (0 if
    /// none). A peer that closed the connection or died is `PeerLost`.
    pub(crate) fn peek(&self, buf: &mut [u8], during: &str) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some(mut tls) = self.session() {
            return tls
                .peek(self.fd(), buf)
                .map_err(|e| io_error(e, self.rank, during, self.io_timeout));
        }
        // SAFETY: the descriptor is open for the life of `self`, and `buf`
        // is writable for `buf.len()` bytes.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => Err(io_error(
                io::ErrorKind::UnexpectedEof.into(),
                self.rank,
                during,
                self.io_timeout,
            )),
            n if n > 0 => Ok(n as usize),
            _ => {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                    _ => Err(io_error(err, self.rank, during, self.io_timeout)),
                }
            }
        }
    }

    /// Closes both directions, waking any thread blocked on this link and
    /// making the peer see end-of-stream. Errors (already closed) are ignored.
    pub(crate) fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Maps an I/O error on the connection to `rank` to this crate's error.
/// `waited` is the timeout that was in force, for the message.
pub(crate) fn io_error(err: io::Error, rank: usize, during: &str, waited: Duration) -> Error {
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout {
            what: format!("after {waited:?} waiting for rank {rank} during {during}"),
            rank: Some(rank),
        },
        io::ErrorKind::UnexpectedEof => Error::PeerLost {
            rank,
            context: format!("during {during}: the peer closed the connection"),
        },
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::NotConnected => Error::PeerLost {
            rank,
            context: format!("during {during}: {err}"),
        },
        _ => Error::io(format!("{during} with rank {rank}"), err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_name_the_peer() {
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        let err = io_error(eof, 1, "allreduce", Duration::from_secs(5));
        assert!(err.is_peer_lost());
        assert_eq!(
            err.to_string(),
            "connection to rank 1 lost during allreduce: the peer closed the connection"
        );
        let slow = io::Error::from(io::ErrorKind::WouldBlock);
        let err = io_error(slow, 2, "barrier", Duration::from_secs(5));
        assert!(matches!(err, Error::Timeout { rank: Some(2), .. }));
        assert_eq!(
            err.to_string(),
            "timed out after 5s waiting for rank 2 during barrier"
        );
        let other = io::Error::from(io::ErrorKind::PermissionDenied);
        assert!(matches!(
            io_error(other, 0, "allreduce", Duration::from_secs(1)),
            Error::Io { .. }
        ));
    }
}
