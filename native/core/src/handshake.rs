//! The authenticated handshake that opens every connection: between two ranks
//! of the mesh ([`crate::rendezvous`]), and between a rank and the driver's
//! rendezvous service ([`crate::rendezvous_service`]).
//!
//! On each connection (connector C, acceptor A):
//! 1. C → A: C's hello (magic, protocol version, byte order, kind of
//!    endpoint, rank, job size, nonce; see [`crate::wire`])
//! 2. A → C: A's hello, A's proof
//! 3. C → A: C's proof (only after C verified A's)
//! 4. What the connection is for, once A verified C's proof: on the mesh, A's
//!    ACK; with the service, C's register request and the service's reply.
//!
//! Proofs are HMAC-SHA256 of both hellos (C's first) over the job secret,
//! bound to the role that made them ([`crate::auth`]). The kind bytes are
//! part of what is proved, so a proof made to the service is no proof to a
//! rank. Each side checks the kind byte of the other's hello before anything
//! else, so an address given for the wrong kind of endpoint is named as such
//! instead of failing authentication. An acceptor answers a hello of another
//! protocol version or kind with its own hello, so that the connector can
//! name the mismatch too; bytes that are no horovod-rs hello get no answer.
//!
//! Invariant: nothing that goes wrong in a handshake ends the acceptor's
//! listener. Garbage, silence (bounded by the caller's socket timeouts),
//! another version or kind, and a wrong or withheld proof are each a reason
//! to drop that one connection. Only what the caller finds in an
//! *authenticated* hello (a peer disagreeing about the job) may end
//! rendezvous early.
//!
//! [`Handshake`] is steps 1 to 3 as a state machine over the transcript,
//! without I/O: it says what to send and how many bytes it wants next, and
//! is fed what arrives. [`connect`] and [`accept`] drive it over a stream,
//! one for each side; their callers say how errors name the other end.

use std::io::{self, Read, Write};

use crate::auth::{Role, Secret, TAG_LEN};
use crate::error::{Error, Result};
use crate::wire::{self, Hello, PrefixError, HELLO_LEN, PREFIX_LEN};

// -------------------------------------------------------------------- drivers

/// The endpoint a connector dialled: what it must be, and how errors name it.
pub(crate) struct Dialled {
    /// E.g. "rank 0 at 10.0.0.1:4000".
    pub name: String,
    /// The kind byte its hello must carry.
    pub kind: u8,
    /// Who may have been given different secrets when its proof fails, e.g.
    /// "the ranks".
    pub secret_holders: &'static str,
}

/// The connector's side, steps 1 to 3: sends `ours`, checks the acceptor's
/// hello and proof, sends this side's proof. Returns the acceptor's hello,
/// authenticated but not yet checked against the job (the caller's part).
///
/// `io` words an I/O failure (timeouts come from `stream`'s settings); the
/// peer closing the connection is `UnexpectedEof`.
pub(crate) fn connect<S: Read + Write>(
    stream: S,
    secret: &Secret,
    ours: &Hello,
    dialled: &Dialled,
    io: impl FnOnce(io::Error) -> Error,
) -> Result<Hello> {
    let handshake = Handshake::connector(secret, ours, dialled.kind);
    run(handshake, stream).map_err(|failure| match failure {
        Failure::Io(e) => io(e),
        // The acceptor sends its proof with its hello: closing before it
        // is simply closing.
        Failure::ProofWithheld => io(closed()),
        Failure::Protocol(e) => version_mismatch(dialled.name.clone(), e),
        Failure::Kind { theirs, expected } => kind_mismatch(dialled.name.clone(), theirs, expected),
        Failure::BadProof => Error::AuthFailed {
            detail: format!(
                "{} could not prove it knows the job secret (were {} given different secrets?)",
                dialled.name, dialled.secret_holders
            ),
        },
    })
}

/// The acceptor's side, steps 1 to 3: checks the connector's hello, sends
/// `ours` and this side's proof, checks the connector's proof. Returns the
/// connector's hello, authenticated but not yet checked against the job (the
/// caller's part); an error is the reason to drop the connection, for the
/// log.
///
/// The connector must send a hello of kind `expected`. `io` words an I/O
/// failure (timeouts come from `stream`'s settings); the peer closing the
/// connection is `UnexpectedEof`.
pub(crate) fn accept<S: Read + Write>(
    stream: S,
    secret: &Secret,
    ours: &Hello,
    expected: u8,
    io: impl FnOnce(io::Error) -> String,
) -> std::result::Result<Hello, String> {
    let handshake = Handshake::acceptor(secret, ours, expected);
    run(handshake, stream).map_err(|failure| match failure {
        Failure::Io(e) => io(e),
        // A genuine connector does this when this side's proof fails with
        // its secret.
        Failure::ProofWithheld => "it closed the connection instead of proving it knows the \
            job secret (a rank given a different secret does this)"
            .to_string(),
        Failure::Protocol(PrefixError::BadMagic) => "not a horovod-rs hello".to_string(),
        Failure::Protocol(PrefixError::Version(version)) => format!(
            "it speaks protocol version {version}, this library speaks {}",
            wire::PROTOCOL_VERSION
        ),
        Failure::Kind { theirs, expected } => format!(
            "it is {}, not {}",
            wire::kind_name(theirs),
            wire::kind_name(expected)
        ),
        Failure::BadProof => "it could not prove it knows the job secret".to_string(),
    })
}

/// Sends and receives what `handshake` asks for until it ends.
fn run<S: Read + Write>(
    mut handshake: Handshake<'_>,
    mut stream: S,
) -> std::result::Result<Hello, Failure> {
    let mut step = handshake.start();
    loop {
        step = match step {
            Step::Exchange { send, wanted } => {
                stream.write_all(&send).map_err(Failure::Io)?;
                handshake.receive(&read_up_to(&mut stream, wanted).map_err(Failure::Io)?)
            }
            Step::Done { send, peer } => {
                stream.write_all(&send).map_err(Failure::Io)?;
                return Ok(peer);
            }
            Step::Failed { answer, failure } => {
                // Best effort: the connection is dropped either way.
                let _ = stream.write_all(&answer);
                return Err(failure);
            }
        };
    }
}

/// What arrives next, at most `wanted` bytes; none once the peer closed.
fn read_up_to(stream: &mut impl Read, wanted: usize) -> io::Result<Vec<u8>> {
    let mut buffer = vec![0u8; wanted];
    loop {
        match stream.read(&mut buffer) {
            Ok(got) => {
                buffer.truncate(got);
                return Ok(buffer);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The error `read_exact` gives once the peer closed the connection, which
/// the callers' wording expects.
fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the peer closed the connection",
    )
}

/// Checks that a hello can carry rank `rank` of a job of `size` ranks: the
/// size fits its u32, and the rank is below the size.
pub(crate) fn check_rank(rank: usize, size: usize) -> Result<()> {
    if u32::try_from(size).is_err() {
        return Err(Error::InvalidArgument(format!("{size} ranks are too many")));
    }
    if rank >= size {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is out of range for {size} ranks"
        )));
    }
    Ok(())
}

/// The error naming `peer` whose hello is not one of this version.
pub(crate) fn version_mismatch(peer: String, error: PrefixError) -> Error {
    let detail = match error {
        PrefixError::BadMagic => {
            "it did not answer with a horovod-rs hello (is the address right?)".to_string()
        }
        PrefixError::Version(theirs) => format!(
            "it speaks protocol version {theirs}, this library speaks {}",
            wire::PROTOCOL_VERSION
        ),
    };
    Error::VersionMismatch { peer, detail }
}

/// The error naming `peer` whose hello says it is of kind `theirs`, not
/// `expected`.
fn kind_mismatch(peer: String, theirs: u8, expected: u8) -> Error {
    Error::VersionMismatch {
        peer,
        detail: format!(
            "it is {}, not {} (is the address right?)",
            wire::kind_name(theirs),
            wire::kind_name(expected)
        ),
    }
}

// -------------------------------------------------------------- state machine

/// What a [`Handshake`] asks of its driver next.
#[derive(Debug)]
enum Step {
    /// Send `send` (possibly nothing), then read at most `wanted` bytes and
    /// [`Handshake::receive`] them.
    Exchange { send: Vec<u8>, wanted: usize },
    /// Send `send` (possibly nothing): the other end is authenticated, and
    /// `peer` is its hello.
    Done { send: Vec<u8>, peer: Hello },
    /// The handshake failed. Send `answer` (possibly nothing) if possible,
    /// then drop the connection.
    Failed { answer: Vec<u8>, failure: Failure },
}

/// Why a handshake failed.
#[derive(Debug)]
enum Failure {
    /// Reading or writing failed, or the peer closed the connection
    /// (`UnexpectedEof`) before its proof was due.
    Io(io::Error),
    /// The peer closed the connection where its proof was due.
    ProofWithheld,
    /// The peer's hello is no horovod-rs hello, or one of another version.
    Protocol(PrefixError),
    /// The peer's hello is of another kind of endpoint than expected.
    Kind { theirs: u8, expected: u8 },
    /// The peer's proof is wrong: it does not know the job secret.
    BadProof,
}

/// What a handshake waits for from the other end.
#[derive(Debug)]
enum Awaiting {
    /// The part of its hello every protocol version shares.
    Prefix,
    /// The rest of its hello.
    Hello,
    /// Its proof, its hello decoded.
    Proof(Hello),
    /// Nothing: the handshake is over.
    Nothing,
}

/// One end of steps 1 to 3, fed the bytes the other end sends.
///
/// Start with [`Handshake::start`], then follow the [`Step`]s: each
/// [`Handshake::receive`] takes at most the bytes the last step wanted, and
/// an empty slice when the peer closed the connection.
struct Handshake<'a> {
    role: Role,
    secret: &'a Secret,
    ours: [u8; HELLO_LEN],
    expected: u8,
    /// The other end's bytes so far: its hello, then its proof.
    received: Vec<u8>,
    awaiting: Awaiting,
}

impl<'a> Handshake<'a> {
    /// The end that opened the connection, expecting an acceptor of kind
    /// `expected`.
    fn connector(secret: &'a Secret, ours: &Hello, expected: u8) -> Handshake<'a> {
        Handshake::new(Role::Connector, secret, ours, expected)
    }

    /// The end that accepted the connection, expecting a connector of kind
    /// `expected`.
    fn acceptor(secret: &'a Secret, ours: &Hello, expected: u8) -> Handshake<'a> {
        Handshake::new(Role::Acceptor, secret, ours, expected)
    }

    fn new(role: Role, secret: &'a Secret, ours: &Hello, expected: u8) -> Handshake<'a> {
        Handshake {
            role,
            secret,
            ours: ours.encode(),
            expected,
            received: Vec::with_capacity(HELLO_LEN + TAG_LEN),
            awaiting: Awaiting::Prefix,
        }
    }

    /// The first step: the connector sends its hello (step 1); both then
    /// read the other's hello.
    fn start(&self) -> Step {
        let send = match self.role {
            Role::Connector => self.ours.to_vec(),
            Role::Acceptor => Vec::new(),
        };
        Step::Exchange {
            send,
            wanted: PREFIX_LEN,
        }
    }

    /// Takes the next bytes the other end sent (an empty slice: it closed
    /// the connection) and says what to do next.
    ///
    /// # Panics
    /// If given more bytes than the last step wanted, or called after the
    /// handshake ended: both are mistakes of the driver.
    fn receive(&mut self, bytes: &[u8]) -> Step {
        let wanted = self.wanted();
        assert!(
            bytes.len() <= wanted,
            "received {} bytes where the handshake wanted {wanted}",
            bytes.len()
        );
        if bytes.is_empty() {
            let failure = match self.awaiting {
                Awaiting::Proof(_) => Failure::ProofWithheld,
                _ => Failure::Io(closed()),
            };
            return self.fail(failure);
        }
        self.received.extend_from_slice(bytes);
        if bytes.len() < wanted {
            return Step::Exchange {
                send: Vec::new(),
                wanted: wanted - bytes.len(),
            };
        }
        match std::mem::replace(&mut self.awaiting, Awaiting::Nothing) {
            Awaiting::Prefix => self.check_prefix(),
            Awaiting::Hello => self.check_hello(),
            Awaiting::Proof(peer) => self.check_proof(peer),
            Awaiting::Nothing => unreachable!("wanted() is 0 once the handshake is over"),
        }
    }

    /// How many more bytes complete what the handshake awaits.
    fn wanted(&self) -> usize {
        let piece_ends_at = match self.awaiting {
            Awaiting::Prefix => PREFIX_LEN,
            Awaiting::Hello => HELLO_LEN,
            Awaiting::Proof(_) => HELLO_LEN + TAG_LEN,
            Awaiting::Nothing => panic!("the handshake is over"),
        };
        piece_ends_at - self.received.len()
    }

    fn check_prefix(&mut self) -> Step {
        let prefix = self.received[..PREFIX_LEN].try_into().expect("a prefix");
        if let Err(error) = wire::check_prefix(prefix) {
            return self.fail(Failure::Protocol(error));
        }
        self.awaiting = Awaiting::Hello;
        Step::Exchange {
            send: Vec::new(),
            wanted: HELLO_LEN - PREFIX_LEN,
        }
    }

    fn check_hello(&mut self) -> Step {
        let peer = match Hello::decode(self.their_hello()) {
            Ok(peer) => peer,
            Err(error) => return self.fail(Failure::Protocol(error)),
        };
        if peer.kind != self.expected {
            return self.fail(Failure::Kind {
                theirs: peer.kind,
                expected: self.expected,
            });
        }
        self.awaiting = Awaiting::Proof(peer);
        let send = match self.role {
            // Step 2.
            Role::Acceptor => [self.ours.as_slice(), &self.prove()].concat(),
            Role::Connector => Vec::new(),
        };
        Step::Exchange {
            send,
            wanted: TAG_LEN,
        }
    }

    fn check_proof(&mut self, peer: Hello) -> Step {
        let theirs = match self.role {
            Role::Connector => Role::Acceptor,
            Role::Acceptor => Role::Connector,
        };
        let proof = &self.received[HELLO_LEN..];
        if !self.secret.verify(theirs, &self.transcript(), proof) {
            return self.fail(Failure::BadProof);
        }
        let send = match self.role {
            // Step 3.
            Role::Connector => self.prove().to_vec(),
            Role::Acceptor => Vec::new(),
        };
        Step::Done { send, peer }
    }

    /// Ends the handshake. An acceptor answers a hello it refuses for its
    /// version or kind with its own (the connector sent its own first), so
    /// the connector can name the mismatch.
    fn fail(&mut self, failure: Failure) -> Step {
        self.awaiting = Awaiting::Nothing;
        let answers = self.role == Role::Acceptor
            && matches!(
                failure,
                Failure::Protocol(PrefixError::Version(_)) | Failure::Kind { .. }
            );
        let answer = if answers {
            self.ours.to_vec()
        } else {
            Vec::new()
        };
        Step::Failed { answer, failure }
    }

    fn their_hello(&self) -> &[u8; HELLO_LEN] {
        self.received[..HELLO_LEN].try_into().expect("a hello")
    }

    /// Both hellos, the connector's first.
    fn transcript(&self) -> Vec<u8> {
        let (connector, acceptor) = match self.role {
            Role::Connector => (&self.ours, self.their_hello()),
            Role::Acceptor => (self.their_hello(), &self.ours),
        };
        [connector.as_slice(), acceptor.as_slice()].concat()
    }

    fn prove(&self) -> [u8; TAG_LEN] {
        self.secret.prove(self.role, &self.transcript())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::NONCE_LEN;
    use crate::wire::{KIND_RANK, KIND_SERVICE, KIND_SERVICE_CLIENT};

    fn key(bytes: &[u8]) -> Secret {
        Secret::new(bytes).unwrap()
    }

    fn hello(kind: u8, rank: u32, nonce: u8) -> Hello {
        Hello::of_kind(kind, rank, 2, [nonce; NONCE_LEN])
    }

    /// Feeds `bytes` one at a time, as a slow network might deliver them.
    /// Returns the step after the last byte, or the first step before it
    /// that sends something or ends the handshake.
    fn deliver(handshake: &mut Handshake<'_>, bytes: &[u8]) -> Step {
        let (last, before) = bytes.split_last().expect("bytes to deliver");
        for byte in before {
            match handshake.receive(std::slice::from_ref(byte)) {
                Step::Exchange { send, .. } if send.is_empty() => {}
                early => return early,
            }
        }
        handshake.receive(std::slice::from_ref(last))
    }

    fn exchange(step: Step) -> (Vec<u8>, usize) {
        match step {
            Step::Exchange { send, wanted } => (send, wanted),
            other => panic!("not an exchange: {other:?}"),
        }
    }

    fn done(step: Step) -> (Vec<u8>, Hello) {
        match step {
            Step::Done { send, peer } => (send, peer),
            other => panic!("not done: {other:?}"),
        }
    }

    fn failed(step: Step) -> (Vec<u8>, Failure) {
        match step {
            Step::Failed { answer, failure } => (answer, failure),
            other => panic!("not failed: {other:?}"),
        }
    }

    /// A connector's hello, and the acceptor's hello and proof answering it.
    fn steps_1_and_2(connector: &mut Handshake<'_>, acceptor: &mut Handshake<'_>) -> Vec<u8> {
        let (hello, wanted) = exchange(connector.start());
        assert_eq!((hello.len(), wanted), (HELLO_LEN, PREFIX_LEN));
        assert_eq!(exchange(acceptor.start()), (Vec::new(), PREFIX_LEN));
        let (reply, wanted) = exchange(deliver(acceptor, &hello));
        assert_eq!((reply.len(), wanted), (HELLO_LEN + TAG_LEN, TAG_LEN));
        reply
    }

    #[test]
    fn ends_with_the_secret_authenticate_each_other() {
        let secret = key(b"job");
        let (c_hello, a_hello) = (hello(KIND_RANK, 1, 1), hello(KIND_RANK, 0, 2));
        let mut c = Handshake::connector(&secret, &c_hello, KIND_RANK);
        let mut a = Handshake::acceptor(&secret, &a_hello, KIND_RANK);
        let reply = steps_1_and_2(&mut c, &mut a);
        assert_eq!(reply[..HELLO_LEN], a_hello.encode());
        let (proof, peer) = done(deliver(&mut c, &reply));
        assert_eq!((proof.len(), peer), (TAG_LEN, a_hello));
        let (nothing, peer) = done(deliver(&mut a, &proof));
        assert_eq!((nothing, peer), (Vec::new(), c_hello));
    }

    #[test]
    fn connector_refuses_an_acceptor_without_the_secret_and_withholds_its_proof() {
        let (ours, theirs) = (key(b"job"), key(b"other"));
        let mut c = Handshake::connector(&ours, &hello(KIND_RANK, 1, 1), KIND_RANK);
        let mut a = Handshake::acceptor(&theirs, &hello(KIND_RANK, 0, 2), KIND_RANK);
        let reply = steps_1_and_2(&mut c, &mut a);
        let (answer, failure) = failed(deliver(&mut c, &reply));
        assert!(answer.is_empty());
        assert!(matches!(failure, Failure::BadProof), "{failure:?}");
        let (answer, failure) = failed(a.receive(&[]));
        assert!(answer.is_empty());
        assert!(matches!(failure, Failure::ProofWithheld), "{failure:?}");
    }

    #[test]
    fn acceptor_refuses_a_forged_proof() {
        let secret = key(b"job");
        let mut c = Handshake::connector(&secret, &hello(KIND_RANK, 1, 1), KIND_RANK);
        let mut a = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 2), KIND_RANK);
        steps_1_and_2(&mut c, &mut a);
        let (answer, failure) = failed(deliver(&mut a, &[0u8; TAG_LEN]));
        assert!(answer.is_empty());
        assert!(matches!(failure, Failure::BadProof), "{failure:?}");
    }

    #[test]
    fn a_proof_is_not_replayed_onto_another_connection() {
        let secret = key(b"job");
        let c_hello = hello(KIND_RANK, 1, 1);
        let mut c = Handshake::connector(&secret, &c_hello, KIND_RANK);
        let mut a = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 2), KIND_RANK);
        let reply = steps_1_and_2(&mut c, &mut a);
        let (proof, _) = done(deliver(&mut c, &reply));
        // The same hello to an acceptor with another nonce.
        let mut again = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 3), KIND_RANK);
        again.start();
        exchange(deliver(&mut again, &c_hello.encode()));
        let (_, failure) = failed(deliver(&mut again, &proof));
        assert!(matches!(failure, Failure::BadProof), "{failure:?}");
    }

    #[test]
    fn other_kind_is_refused_before_any_proof_and_the_acceptor_answers() {
        let secret = key(b"job");
        let a_hello = hello(KIND_RANK, 0, 2);
        // A rank registering with the service, dialling a rank instead.
        let mut c = Handshake::connector(&secret, &hello(KIND_SERVICE_CLIENT, 1, 1), KIND_SERVICE);
        let mut a = Handshake::acceptor(&secret, &a_hello, KIND_RANK);
        let (c_hello, _) = exchange(c.start());
        let (answer, failure) = failed(deliver(&mut a, &c_hello));
        assert_eq!(answer, a_hello.encode(), "answered with its hello alone");
        assert!(
            matches!(
                failure,
                Failure::Kind {
                    theirs: KIND_SERVICE_CLIENT,
                    expected: KIND_RANK
                }
            ),
            "{failure:?}"
        );
        let (nothing, failure) = failed(deliver(&mut c, &answer));
        assert!(nothing.is_empty());
        assert!(
            matches!(
                failure,
                Failure::Kind {
                    theirs: KIND_RANK,
                    expected: KIND_SERVICE
                }
            ),
            "{failure:?}"
        );
    }

    #[test]
    fn other_version_is_refused_from_the_prefix_and_the_acceptor_answers() {
        let secret = key(b"job");
        let a_hello = hello(KIND_RANK, 0, 2);
        let mut old = hello(KIND_RANK, 1, 1).encode();
        old[8..10].copy_from_slice(&99u16.to_le_bytes());
        let mut a = Handshake::acceptor(&secret, &a_hello, KIND_RANK);
        let (answer, failure) = failed(deliver(&mut a, &old[..PREFIX_LEN]));
        assert_eq!(answer, a_hello.encode());
        assert!(
            matches!(failure, Failure::Protocol(PrefixError::Version(99))),
            "{failure:?}"
        );
        let mut c = Handshake::connector(&secret, &hello(KIND_RANK, 1, 1), KIND_RANK);
        c.start();
        let (nothing, failure) = failed(deliver(&mut c, &old));
        assert!(nothing.is_empty());
        assert!(
            matches!(failure, Failure::Protocol(PrefixError::Version(99))),
            "{failure:?}"
        );
    }

    #[test]
    fn garbage_is_refused_unanswered() {
        let secret = key(b"job");
        let mut a = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 2), KIND_RANK);
        let (answer, failure) = failed(deliver(&mut a, &[0xAB; PREFIX_LEN]));
        assert!(answer.is_empty(), "a stranger learns nothing");
        assert!(
            matches!(failure, Failure::Protocol(PrefixError::BadMagic)),
            "{failure:?}"
        );
    }

    #[test]
    fn truncated_input_waits_for_the_rest_then_names_the_close() {
        let secret = key(b"job");
        let c_hello = hello(KIND_RANK, 1, 1).encode();
        let mut a = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 2), KIND_RANK);
        assert_eq!(exchange(a.receive(b"HOROV")), (Vec::new(), PREFIX_LEN - 5));
        let (_, failure) = failed(a.receive(&[]));
        assert!(
            matches!(&failure, Failure::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof),
            "{failure:?}"
        );

        // A hello cut short after its prefix.
        let mut a = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 2), KIND_RANK);
        let (_, wanted) = exchange(deliver(&mut a, &c_hello[..PREFIX_LEN + 3]));
        assert_eq!(wanted, HELLO_LEN - PREFIX_LEN - 3);
        let (_, failure) = failed(a.receive(&[]));
        assert!(matches!(failure, Failure::Io(_)), "{failure:?}");

        // A proof cut short.
        let mut a = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 2), KIND_RANK);
        exchange(deliver(&mut a, &c_hello));
        let (_, wanted) = exchange(deliver(&mut a, &[1u8; TAG_LEN - 1]));
        assert_eq!(wanted, 1);
        let (_, failure) = failed(a.receive(&[]));
        assert!(matches!(failure, Failure::ProofWithheld), "{failure:?}");
    }

    #[test]
    fn check_rank_names_what_a_hello_cannot_carry() {
        assert!(check_rank(0, 1).is_ok());
        let err = check_rank(2, 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid argument: rank 2 is out of range for 2 ranks"
        );
        if let Some(too_many) = (u32::MAX as usize).checked_add(1) {
            let err = check_rank(0, too_many).unwrap_err();
            assert!(err.to_string().ends_with("ranks are too many"), "{err}");
        }
    }

    #[test]
    #[should_panic(expected = "wanted 10")]
    fn more_bytes_than_wanted_is_a_driver_mistake() {
        let secret = key(b"job");
        let mut a = Handshake::acceptor(&secret, &hello(KIND_RANK, 0, 2), KIND_RANK);
        a.receive(&hello(KIND_RANK, 1, 1).encode());
    }

    // ---------------------------------------------------------------- drivers

    /// A stream that yields `input` and records what is written.
    struct Script {
        input: io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Script {
        fn new(input: Vec<u8>) -> Script {
            Script {
                input: io::Cursor::new(input),
                output: Vec::new(),
            }
        }
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Script {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.write(buf)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn service() -> Dialled {
        Dialled {
            name: "the service at h:1".into(),
            kind: KIND_SERVICE,
            secret_holders: "the driver and the ranks",
        }
    }

    fn lost(e: io::Error) -> Error {
        Error::io("handshaking", e)
    }

    /// The acceptor's step 2 answering `connector`: its hello and proof.
    fn answer(secret: &Secret, connector: &Hello, acceptor: &Hello) -> Vec<u8> {
        let mut a = Handshake::acceptor(secret, acceptor, connector.kind);
        exchange(deliver(&mut a, &connector.encode())).0
    }

    #[test]
    fn connect_sends_hello_then_proof_and_returns_the_acceptors_hello() {
        let secret = key(b"job");
        let (ours, theirs) = (hello(KIND_SERVICE_CLIENT, 1, 1), hello(KIND_SERVICE, 0, 2));
        let mut a = Handshake::acceptor(&secret, &theirs, KIND_SERVICE_CLIENT);
        let reply = exchange(deliver(&mut a, &ours.encode())).0;
        let mut script = Script::new(reply);
        let peer = connect(&mut script, &secret, &ours, &service(), lost).unwrap();
        assert_eq!(peer, theirs);
        assert_eq!(script.output[..HELLO_LEN], ours.encode());
        let (_, authenticated) = done(deliver(&mut a, &script.output[HELLO_LEN..]));
        assert_eq!(authenticated, ours);
    }

    #[test]
    fn connect_names_the_dialled_end() {
        let secret = key(b"job");
        let ours = hello(KIND_SERVICE_CLIENT, 1, 1);
        let forged = answer(&key(b"other"), &ours, &hello(KIND_SERVICE, 0, 2));
        let err = connect(Script::new(forged), &secret, &ours, &service(), lost).unwrap_err();
        assert_eq!(
            err.to_string(),
            "authentication failed: the service at h:1 could not prove it knows the job secret \
             (were the driver and the ranks given different secrets?)"
        );
        let rank = hello(KIND_RANK, 0, 2).encode().to_vec();
        let err = connect(Script::new(rank), &secret, &ours, &service(), lost).unwrap_err();
        assert_eq!(
            err.to_string(),
            "protocol mismatch with the service at h:1: it is a rank of the mesh, not the \
             driver's rendezvous service (is the address right?)"
        );
        let err = connect(
            Script::new(b"HTTP/1.1 400".to_vec()),
            &secret,
            &ours,
            &service(),
            lost,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("did not answer with a horovod-rs hello"),
            "{err}"
        );
        let err = connect(Script::new(Vec::new()), &secret, &ours, &service(), lost).unwrap_err();
        assert!(matches!(&err, Error::Io { .. }), "{err}");
    }

    #[test]
    fn accept_answers_and_returns_the_connectors_hello() {
        let secret = key(b"job");
        let (theirs, ours) = (hello(KIND_RANK, 1, 1), hello(KIND_RANK, 0, 2));
        let mut c = Handshake::connector(&secret, &theirs, KIND_RANK);
        let reply = answer(&secret, &theirs, &ours);
        let (proof, _) = done(deliver(&mut c, &reply));
        let input = [theirs.encode().as_slice(), &proof].concat();
        let mut script = Script::new(input);
        let peer = accept(&mut script, &secret, &ours, KIND_RANK, |e| e.to_string()).unwrap();
        assert_eq!(peer, theirs);
        assert_eq!(script.output, reply);
    }

    #[test]
    fn accept_gives_the_reason_to_drop_the_connection() {
        let secret = key(b"job");
        let ours = hello(KIND_RANK, 0, 2);
        let reason = |input: Vec<u8>| {
            let io = |e: io::Error| format!("i/o: {:?}", e.kind());
            accept(Script::new(input), &secret, &ours, KIND_RANK, io).unwrap_err()
        };
        let theirs = hello(KIND_RANK, 1, 1).encode();
        assert_eq!(reason(vec![0xAB; 64]), "not a horovod-rs hello");
        assert_eq!(reason(b"HOROV".to_vec()), "i/o: UnexpectedEof");
        assert_eq!(
            reason(theirs.to_vec()),
            "it closed the connection instead of proving it knows the job secret \
             (a rank given a different secret does this)"
        );
        assert_eq!(
            reason([theirs.as_slice(), &[0u8; TAG_LEN]].concat()),
            "it could not prove it knows the job secret"
        );
        let client = hello(KIND_SERVICE_CLIENT, 1, 1).encode().to_vec();
        assert_eq!(
            reason(client),
            "it is a rank registering with the rendezvous service, not a rank of the mesh"
        );
        let mut old = theirs;
        old[8..10].copy_from_slice(&99u16.to_le_bytes());
        assert_eq!(
            reason(old.to_vec()),
            format!(
                "it speaks protocol version 99, this library speaks {}",
                wire::PROTOCOL_VERSION
            )
        );
    }
}
