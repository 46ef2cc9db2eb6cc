//! Sockets as the mesh and the driver's rendezvous service use them:
//! binding a listener, opening a connection to "host:port", and the bounds
//! on waiting for either.

use std::io;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::{Error, Result};

/// Pause after a failed accept (e.g. out of descriptors) before the next
/// try: the listener stays readable, so waiting on it would not pause.
pub(crate) const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(5);
/// Longest pause between attempts to connect to a peer not listening yet.
pub(crate) const MAX_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Longer timeouts are cut to this, so deadlines cannot overflow.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest single TCP connect attempt.
pub(crate) const MAX_CONNECT_ATTEMPT: Duration = Duration::from_secs(5);

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
