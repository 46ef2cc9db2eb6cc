//! Optional encryption of the links between ranks: TLS 1.3 (rustls, ring).
//!
//! Off by default; `HOROVOD_RS_TLS=1` on every rank turns it on
//! ([`setting`]), for clusters whose network others can read. It wraps each
//! link after the rendezvous handshake has authenticated it, so the job's
//! secret still admits every connection, and everything after that (the
//! engine's negotiation, headers, tensors) travels encrypted.
//!
//! Credentials: the job secret is all a rank holds, so both ends of a link
//! derive the same Ed25519 key from it and present it as a raw public key
//! (RFC 7250, no certificates); each end accepts only a peer presenting that
//! very key. Finishing the handshake proves the secret on both sides, which
//! also shuts out a stranger taking over an authenticated connection, and
//! the traffic keys come from an ephemeral exchange (forward secrecy).
//!
//! A [`Session`] does its socket I/O without blocking, like the plain links
//! of [`crate::tcp::pump`]: a link's owner waits in `poll(2)` between
//! attempts. Two things a plain socket does not have follow from that:
//! ciphertext waiting to go out after the caller's bytes were taken
//! ([`Session::flushed`]), and plaintext already decrypted that `poll` cannot
//! see ([`Session::has_plaintext`]).

use std::io::{self, BufRead, Read, Write};
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{AlwaysResolvesClientRawPublicKeys, Resumption};
use rustls::crypto::{verify_tls13_signature_with_raw_key, CryptoProvider};
use rustls::pki_types::{
    CertificateDer, PrivatePkcs8KeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::AlwaysResolvesServerRawPublicKeys;
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, ClientConnection, Connection, DigitallySignedStruct, DistinguishedName,
    ServerConfig, ServerConnection, SignatureScheme,
};

use crate::auth::Secret;
use crate::error::{Error, Result};

/// The environment variable that turns encryption on.
pub const TLS_VARIABLE: &str = "HOROVOD_RS_TLS";

/// Most plaintext taken from the caller per attempt to send: a few TLS
/// records, so one busy link cannot hold its lock for long.
const SEND_CHUNK: usize = 256 << 10;
/// Most ciphertext pulled from the socket per attempt to receive.
const RECV_BUDGET: usize = 256 << 10;

/// The TLS configurations of one job, built once from its secret.
#[derive(Clone)]
pub(crate) struct Credentials {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl Credentials {
    pub(crate) fn new(secret: &Secret) -> Result<Credentials> {
        let provider = Arc::new(provider());
        let seed = secret.derive(b"horovod-rs/1 link tls key");
        let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
        pkcs8.extend_from_slice(&seed);
        let key = rustls::crypto::ring::sign::any_eddsa_type(&PrivatePkcs8KeyDer::from(pkcs8))
            .map_err(|e| unusable("deriving the link key", e))?;
        let public = key
            .public_key()
            .ok_or_else(|| unusable("deriving the link key", "no public key"))?
            .as_ref()
            .to_vec();
        let certified = Arc::new(CertifiedKey::new(
            vec![CertificateDer::from(public.clone())],
            key,
        ));
        let pinned = Arc::new(PinnedKey {
            spki: public,
            provider: provider.clone(),
        });

        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| unusable("configuring TLS", e))?
            .with_client_cert_verifier(pinned.clone())
            .with_cert_resolver(Arc::new(AlwaysResolvesServerRawPublicKeys::new(
                certified.clone(),
            )));
        server.send_tls13_tickets = 0; // every link is new: nothing to resume
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| unusable("configuring TLS", e))?
            .dangerous()
            .with_custom_certificate_verifier(pinned)
            .with_client_cert_resolver(Arc::new(AlwaysResolvesClientRawPublicKeys::new(certified)));
        client.resumption = Resumption::disabled();
        Ok(Credentials {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// Runs the TLS handshake on `stream` (blocking, within the stream's
    /// timeouts) as the server when this rank accepted the connection, as
    /// the client when it connected.
    pub(crate) fn handshake(&self, stream: &TcpStream, accepted: bool) -> io::Result<Session> {
        let conn: Connection = if accepted {
            ServerConnection::new(self.server.clone())
                .map_err(io::Error::other)?
                .into()
        } else {
            // Raw public keys: the name is not checked, the pinned key is.
            let name = ServerName::try_from("horovod-rs").map_err(io::Error::other)?;
            ClientConnection::new(self.client.clone(), name)
                .map_err(io::Error::other)?
                .into()
        };
        let mut session = Session { conn };
        let mut stream = stream;
        while session.conn.is_handshaking() {
            let (read, wrote) = session.conn.complete_io(&mut stream)?;
            if read == 0 && wrote == 0 && session.conn.is_handshaking() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(session)
    }
}

/// ring's TLS 1.3 suites, AES-128-GCM first (the fastest with AES
/// instructions; the client's order decides).
fn provider() -> CryptoProvider {
    use rustls::crypto::ring::{cipher_suite, default_provider};
    CryptoProvider {
        cipher_suites: vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..default_provider()
    }
}

/// PKCS#8 v1 of an Ed25519 key (RFC 8410) up to its 32-byte seed.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

fn unusable(what: &str, cause: impl std::fmt::Display) -> Error {
    Error::Unusable {
        cause: format!("{what}: {cause}"),
    }
}

/// Accepts exactly one raw public key: the job's.
#[derive(Debug)]
struct PinnedKey {
    spki: Vec<u8>,
    provider: Arc<CryptoProvider>,
}

impl PinnedKey {
    fn check(&self, presented: &CertificateDer<'_>) -> std::result::Result<(), rustls::Error> {
        if presented.as_ref() == self.spki.as_slice() {
            Ok(())
        } else {
            Err(rustls::Error::General(
                "the peer's key is not this job's (another secret)".into(),
            ))
        }
    }

    fn verify(
        &self,
        message: &[u8],
        key: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.check(key)?;
        verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(key.as_ref()),
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
}

/// The signature checks both verifier traits ask for, alike for the one
/// pinned key.
macro_rules! pinned_key_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            Err(rustls::Error::General("TLS 1.2 is not offered".into()))
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            self.verify(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            vec![SignatureScheme::ED25519]
        }

        fn requires_raw_public_keys(&self) -> bool {
            true
        }
    };
}

impl ServerCertVerifier for PinnedKey {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }

    pinned_key_signatures!();
}

impl ClientCertVerifier for PinnedKey {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ClientCertVerified::assertion())
    }

    pinned_key_signatures!();
}

/// One link's TLS state. Every call is non-blocking on the socket `fd`;
/// would-block moves 0 bytes.
pub(crate) struct Session {
    conn: Connection,
}

impl Session {
    /// Takes up to [`SEND_CHUNK`] bytes of `bytes` once earlier ciphertext
    /// has left; returns how many (0 while earlier ciphertext is waiting for
    /// the socket). What the socket does not take yet stays queued: the
    /// caller keeps flushing until [`Session::flushed`].
    pub(crate) fn try_send(&mut self, fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
        self.try_flush(fd)?;
        if self.conn.wants_write() || bytes.is_empty() {
            return Ok(0);
        }
        let n = self
            .conn
            .writer()
            .write(&bytes[..bytes.len().min(SEND_CHUNK)])?;
        self.try_flush(fd)?;
        Ok(n)
    }

    /// Sends queued ciphertext the socket takes; returns whether any went.
    pub(crate) fn try_flush(&mut self, fd: RawFd) -> io::Result<bool> {
        let mut moved = false;
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut Socket(fd)) {
                Ok(n) => moved |= n > 0,
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }

    /// Whether no ciphertext is waiting to go out.
    pub(crate) fn flushed(&self) -> bool {
        !self.conn.wants_write()
    }

    /// Fills `buf` with the plaintext that has arrived, decrypting up to
    /// [`RECV_BUDGET`] bytes of ciphertext; 0 when nothing has. The peer's
    /// end of the stream is `UnexpectedEof`; a damaged or forged record is
    /// `InvalidData`.
    pub(crate) fn try_recv(&mut self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        let mut pulled = 0;
        while got < buf.len() {
            match self.conn.reader().read(&mut buf[got..]) {
                Ok(0) => return end_of_stream_unless(got), // close_notify
                Ok(n) => {
                    got += n;
                    continue;
                }
                Err(e) if would_block(&e) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return end_of_stream_unless(got)
                }
                Err(e) => return Err(e),
            }
            // rustls holds little decrypted data: decrypt more only once
            // it has been read.
            if pulled >= RECV_BUDGET {
                break;
            }
            match self.pull(fd)? {
                0 => break,
                n => pulled += n,
            }
        }
        self.try_flush(fd)?; // what TLS answers (alerts, key updates)
        Ok(got)
    }

    /// Copies the start of the plaintext that has arrived into `buf`
    /// without consuming it; returns how many bytes (0 if none).
    pub(crate) fn peek(&mut self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        if !self.has_plaintext() {
            self.pull(fd)?;
        }
        let mut reader = self.conn.reader();
        match reader.fill_buf() {
            Ok(chunk) => {
                let n = chunk.len().min(buf.len());
                buf[..n].copy_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e) if would_block(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Whether decrypted bytes are waiting (`poll` on the socket cannot
    /// tell). An error counts as waiting: the next read reports it.
    pub(crate) fn has_plaintext(&mut self) -> bool {
        self.conn.process_new_packets().map_or(true, |state| {
            state.plaintext_bytes_to_read() > 0 || state.peer_has_closed()
        })
    }

    /// Reads what ciphertext the socket has (one read) and decrypts it;
    /// returns how many bytes were read, 0 when none had arrived. The
    /// socket's end of stream is recorded: reading past the plaintext then
    /// fails.
    fn pull(&mut self, fd: RawFd) -> io::Result<usize> {
        match self.conn.read_tls(&mut Socket(fd)) {
            Ok(0) => Ok(0),
            Ok(n) => self.decrypt().map(|()| n),
            Err(e) if would_block(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }

    fn decrypt(&mut self) -> io::Result<()> {
        self.conn
            .process_new_packets()
            .map(|_| ())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")))
    }
}

fn end_of_stream_unless(got: usize) -> io::Result<usize> {
    match got {
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        got => Ok(got),
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// A socket read and written without blocking (and without SIGPIPE).
struct Socket(RawFd);

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: the descriptor is open while its link lives, and `buf` is
        // writable for `buf.len()` bytes.
        let n = unsafe {
            libc::recv(
                self.0,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: the descriptor is open while its link lives, and `buf` is
        // readable for `buf.len()` bytes.
        let n = unsafe {
            libc::send(
                self.0,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}
