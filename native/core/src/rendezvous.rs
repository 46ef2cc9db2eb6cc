//! Rendezvous: turns a listening socket and the list of every rank's address
//! into a communicator whose links open on first use ([`crate::mesh`]).
//!
//! Joining opens only what the join itself needs: every rank sends its host
//! to rank 0 along a binomial tree and gets the list back along it
//! ([`crate::hosts`]), which proves that every rank is up, holds the secret
//! and was given this job. Then the transport is chosen (shared memory when
//! every rank is on this host, the hierarchy's levels where they help, else
//! TCP). Other links open when a collective first needs them.
//!
//! Each connection is authenticated by the handshake of [`crate::handshake`]
//! between two ranks of the job (kind byte "rank"), so a rank dialling the
//! driver's rendezvous service, or the service's client dialling a rank, is
//! named as such. Its step 4 is the acceptor's ACK, or its DECLINE when its
//! own dial to the connector wins. An authenticated peer is then checked
//! against this rank's job: byte order, job size, rank, encryption.

use std::net::TcpListener;

use log::debug;

use crate::address::host;
use crate::auth::Secret;
use crate::communicator::Communicator;
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::fd_limit;
use crate::handshake;
use crate::hosts;
use crate::mesh::accept::MAX_HANDSHAKES;
use crate::mesh::dial::Dialler;
use crate::mesh::job::Job;
use crate::mesh::{Connections, Mesh};
use crate::net::{self, MAX_TIMEOUT};
use crate::spin;
use crate::tls::Credentials;

/// This rank's listening socket, bound before the addresses are exchanged.
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    port: u16,
}

impl Listener {
    /// Binds a listener, e.g. on "0.0.0.0:0" (any interface, a free port).
    pub fn bind(addr: &str) -> Result<Listener> {
        let (inner, port) = net::bind(addr, "a listener")?;
        debug!("listening on {addr}, port {port}");
        Ok(Listener { inner, port })
    }

    /// The port the listener is bound to.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Joins rank `rank` to the job: a communicator whose links to the other
/// ranks, authenticated with `secret`, open when first needed.
///
/// `addresses[i]` is rank i's "host:port"; its length is the job size. The
/// join (every rank's host reaching every rank) waits at most
/// `config.connect_timeout` for a peer to answer; a link opened later gets
/// as long of its own, and then `config.io_timeout` for each read or write.
/// With a single rank, opens no connection.
///
/// # Errors
/// * `InvalidArgument`: rank out of range, empty or unparsable address list,
///   empty secret, zero timeout.
/// * `AuthFailed`: a peer could not prove it knows the secret.
/// * `VersionMismatch`: a peer's address answers with another protocol
///   version, or not as horovod-rs at all.
/// * `Mismatch`: an authenticated peer was given another job size, has
///   another byte order, or claims another rank.
/// * `Timeout`: a peer did not connect, or answer, in time; the message
///   mentions rejected connection attempts (e.g. a rank with another secret).
/// * `PeerLost`: a peer closed the connection during the handshake.
/// * `Io`: the file-descriptor limit is below what a full mesh needs (checked
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
        let mut alone = Communicator::over(Mesh::new(0, vec![None]));
        alone.settle_transport(vec![mine], config)?;
        return Ok(alone);
    }
    // Before any link: past the limit a collective would fail half open.
    // The acceptor's handshakes, and the connection it has just accepted.
    fd_limit::ensure_room_for_mesh(size, MAX_HANDSHAKES + 1)?;
    let credentials = config.tls.then(|| Credentials::new(&secret)).transpose()?;
    let job = Job {
        rank,
        size,
        secret,
        credentials,
        connect_timeout: config.connect_timeout.min(MAX_TIMEOUT),
        io_timeout: config.io_timeout.min(MAX_TIMEOUT),
    };
    let dialler = Dialler::start(listener.inner, addresses.to_vec(), job)?;
    let mut comm = Communicator::over(Mesh::over(Connections::dialling(rank, size, dialler)));
    let hosts = hosts::exchange(&mut comm, &mine)?;
    if cores_for_each(rank, &hosts) {
        comm.poll_busily();
    }
    comm.settle_transport(hosts, config)?;
    Ok(comm)
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
        if !net::is_host_port(address) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{self, TAG_LEN};
    use crate::reduce::ReduceOp;
    use crate::wire::{self, Hello};
    use crate::wire::{HELLO_LEN, PREFIX_LEN};
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::thread;
    use std::time::{Duration, Instant};

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
