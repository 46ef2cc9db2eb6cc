//! What both ends of a connection between two ranks check in its handshake:
//! the secret, and that they were given the same job.

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::auth::{self, Secret};
use crate::error::{Error, Result};
use crate::tls::{Credentials, TLS_VARIABLE};
use crate::wire::{self, Hello, NATIVE_ENDIAN};

/// One rank's identity in its job, and how long its connections may take.
pub(crate) struct Job {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) secret: Secret,
    /// Set when this rank encrypts its links (`HOROVOD_RS_TLS`).
    pub(crate) credentials: Option<Credentials>,
    /// How long a dial may take, its handshake included.
    pub(crate) connect_timeout: Duration,
    /// What every link is given for a read or write.
    pub(crate) io_timeout: Duration,
}

impl Job {
    pub(crate) fn encrypts(&self) -> bool {
        self.credentials.is_some()
    }

    pub(crate) fn hello(&self) -> Result<Hello> {
        // Both fit in u32: rendezvous checked the size.
        Ok(
            Hello::new(self.rank as u32, self.size as u32, auth::nonce()?)
                .encrypting(self.encrypts()),
        )
    }

    /// Checks an authenticated peer's hello against this job. `expected` is
    /// the rank the connector dialled; the acceptor takes any other rank.
    pub(crate) fn check_peer(&self, hello: &Hello, expected: Option<usize>) -> Result<usize> {
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
        if hello.encrypts != self.encrypts() {
            let setting = |on: bool| if on { "on" } else { "off" };
            return Err(Error::Mismatch {
                rank: named,
                detail: format!(
                    "it has {TLS_VARIABLE} {}, this rank {} (set it alike on every rank)",
                    setting(hello.encrypts),
                    setting(self.encrypts())
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
            None if peer == self.rank || peer >= self.size => Err(Error::Mismatch {
                rank: peer,
                detail: format!("it connected as rank {peer} to rank {}", self.rank),
            }),
            _ => Ok(peer),
        }
    }
}

/// Blocking mode, `TCP_NODELAY`, and socket timeouts ending at `deadline`.
pub(crate) fn prepare(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    let remaining = remaining(deadline);
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(remaining))?;
    stream.set_write_timeout(Some(remaining))
}

/// Time left until `deadline`, at least 1 ms (a zero socket timeout is
/// invalid).
pub(crate) fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}
