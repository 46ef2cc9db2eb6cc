//! Waiting for a listener's next connection without a polling pause.
//!
//! An accept loop must also notice what other threads tell it (the service
//! stopping, a handshake's verdict, rendezvous aborting). Polling a
//! non-blocking listener with a pause between tries makes each of those wait
//! for the pause: a few milliseconds on every connection and stop, which is
//! most of a small job's launch. Instead the loop sleeps in `poll(2)` on the
//! listener and on a [`Doorbell`], which the other threads ring.
//!
//! Invariant: a ring is never lost. It stays in the doorbell's socket buffer
//! until the next [`Doorbell::wait`] returns, so a ring that comes while the
//! loop is busy makes the next wait return at once.

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A wake-up for a thread waiting on a listener: a connected pair of
/// non-blocking sockets, rung by writing a byte to one end.
#[derive(Debug)]
pub(crate) struct Doorbell {
    button: UnixStream,
    bell: UnixStream,
}

impl Doorbell {
    /// # Errors
    /// The socket pair cannot be made (e.g. out of file descriptors).
    pub(crate) fn new() -> io::Result<Doorbell> {
        let (button, bell) = UnixStream::pair()?;
        button.set_nonblocking(true)?;
        bell.set_nonblocking(true)?;
        Ok(Doorbell { button, bell })
    }

    /// Wakes the waiting thread, or its next wait if none waits now.
    pub(crate) fn ring(&self) {
        // A full buffer holds rings enough: the waiter wakes all the same.
        let _ = (&self.button).write(&[1]);
    }

    /// Sleeps until `listener` has a connection to accept, the doorbell
    /// rings, or `timeout` passes (`None`: no limit); then forgets the
    /// rings so far. The caller looks at what changed either way.
    ///
    /// # Errors
    /// `poll(2)` failed for another reason than a signal.
    pub(crate) fn wait(&self, listener: &TcpListener, timeout: Option<Duration>) -> io::Result<()> {
        let mut fds = [listener.as_raw_fd(), self.bell.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        let millis = timeout.map_or(-1, |t| {
            // Round up: a zero-millisecond poll would spin until the deadline.
            libc::c_int::try_from(t.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX)
        });
        // SAFETY: `fds` is a valid array of two pollfd structures whose
        // descriptors stay open while `listener` and `self` are borrowed.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        let mut rings = [0u8; 64];
        while matches!((&self.bell).read(&mut rings), Ok(n) if n > 0) {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::thread;
    use std::time::Instant;

    fn listener() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").unwrap()
    }

    #[test]
    fn a_ring_wakes_a_waiting_thread_at_once() {
        let doorbell = Arc::new(Doorbell::new().unwrap());
        let listener = listener();
        let ringer = {
            let doorbell = Arc::clone(&doorbell);
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(20));
                doorbell.ring();
            })
        };
        let start = Instant::now();
        doorbell
            .wait(&listener, Some(Duration::from_secs(10)))
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        ringer.join().unwrap();
    }

    #[test]
    fn a_ring_before_the_wait_is_kept_and_then_forgotten() {
        let doorbell = Doorbell::new().unwrap();
        let listener = listener();
        doorbell.ring();
        doorbell.ring();
        doorbell
            .wait(&listener, Some(Duration::from_secs(10)))
            .unwrap();
        let start = Instant::now();
        doorbell
            .wait(&listener, Some(Duration::from_millis(30)))
            .unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(25),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_connection_wakes_the_wait() {
        let doorbell = Doorbell::new().unwrap();
        let listener = listener();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let start = Instant::now();
        doorbell
            .wait(&listener, Some(Duration::from_secs(10)))
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(listener.accept().is_ok());
    }
}
