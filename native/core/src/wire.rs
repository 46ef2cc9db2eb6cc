//! Byte layouts of what ranks send each other besides element data.
//!
//! * The hello opens every connection, in both directions. Its first
//!   [`PREFIX_LEN`] bytes (magic and protocol version) keep this layout in
//!   every version, so a peer of another version is recognised and named
//!   instead of being misread. The rest carries byte order, the kind of
//!   endpoint, rank, job size and the authentication nonce. Integers in it are
//!   little-endian.
//! * The kind byte tells a rank of the mesh from a rank registering with the
//!   driver's rendezvous service and from that service, so an address given
//!   for the wrong one is named instead of failing authentication. Ranks of
//!   the mesh send 0, which is what the byte held while it was reserved, so
//!   their hellos are unchanged.
//! * A collective header opens every collective on every connection it uses,
//!   so ranks that call different collectives (another operation, element
//!   type, length or root) stop with an error instead of exchanging garbage.
//!
//! Element data itself is raw native-endian bytes with no framing: both sides
//! derive every message length from the header they agreed on.

use crate::auth::NONCE_LEN;
use crate::error::{Error, Result};
use crate::reduce::{type_name, ReduceOp};

/// First bytes of every hello.
pub(crate) const MAGIC: [u8; 8] = *b"HOROVDRS";
/// Version of this protocol; any change to the bytes exchanged bumps it.
pub(crate) const PROTOCOL_VERSION: u16 = 9;
/// Magic plus version: the part of the hello every version shares.
pub(crate) const PREFIX_LEN: usize = 10;
/// Length of a whole hello of this version.
pub(crate) const HELLO_LEN: usize = PREFIX_LEN + 3 + 4 + 4 + NONCE_LEN;
/// Byte the acceptor sends once it has verified the connector's proof.
pub(crate) const ACK: u8 = 0x06;
/// Byte an acceptor sends instead when its own rank's dial to the connector
/// wins (`mesh::pairs`): the connector drops this connection and waits for
/// that one.
pub(crate) const DECLINE: u8 = 0x15;
/// Length of a collective header.
pub(crate) const HEADER_LEN: usize = 24;

/// Kind byte of a rank of the mesh (connecting or accepting).
pub(crate) const KIND_RANK: u8 = 0;
/// Kind byte of a rank registering with the driver's rendezvous service.
pub(crate) const KIND_SERVICE_CLIENT: u8 = 1;
/// Kind byte of the driver's rendezvous service.
pub(crate) const KIND_SERVICE: u8 = 2;

/// Name of an endpoint kind, for error messages.
pub(crate) fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_RANK => "a rank of the mesh",
        KIND_SERVICE_CLIENT => "a rank registering with the rendezvous service",
        KIND_SERVICE => "the driver's rendezvous service",
        _ => "an endpoint of unknown kind",
    }
}

/// Byte-order flag of this build: 1 little-endian, 2 big-endian.
pub(crate) const NATIVE_ENDIAN: u8 = if cfg!(target_endian = "little") { 1 } else { 2 };

/// Name of a byte-order flag, for error messages.
pub(crate) fn endian_name(flag: u8) -> &'static str {
    match flag {
        1 => "little-endian",
        2 => "big-endian",
        _ => "unknown byte order",
    }
}

/// Why a hello prefix is not one of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrefixError {
    /// Not a horovod-rs hello at all.
    BadMagic,
    /// A horovod-rs hello of another protocol version.
    Version(u16),
}

/// Checks the magic and version of a received hello prefix.
pub(crate) fn check_prefix(prefix: &[u8; PREFIX_LEN]) -> Result<(), PrefixError> {
    if prefix[..8] != MAGIC {
        return Err(PrefixError::BadMagic);
    }
    let version = u16::from_le_bytes([prefix[8], prefix[9]]);
    if version != PROTOCOL_VERSION {
        return Err(PrefixError::Version(version));
    }
    Ok(())
}

/// The opening message of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    /// Byte-order flag of the sender.
    pub endian: u8,
    /// What the sender is: [`KIND_RANK`], [`KIND_SERVICE_CLIENT`] or
    /// [`KIND_SERVICE`].
    pub kind: u8,
    /// Whether the sender encrypts its links to ranks (`HOROVOD_RS_TLS`);
    /// ranks of one job must agree. False for the rendezvous service's ends.
    pub encrypts: bool,
    /// Rank of the sender.
    pub rank: u32,
    /// Number of ranks the sender was given.
    pub size: u32,
    /// The sender's authentication nonce.
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// This build's hello of a rank of the mesh.
    pub(crate) fn new(rank: u32, size: u32, nonce: [u8; NONCE_LEN]) -> Hello {
        Hello::of_kind(KIND_RANK, rank, size, nonce)
    }

    /// This build's hello of an endpoint of `kind`.
    pub(crate) fn of_kind(kind: u8, rank: u32, size: u32, nonce: [u8; NONCE_LEN]) -> Hello {
        Hello {
            endian: NATIVE_ENDIAN,
            kind,
            encrypts: false,
            rank,
            size,
            nonce,
        }
    }

    /// This hello, saying whether its sender encrypts its links.
    pub(crate) fn encrypting(mut self, encrypts: bool) -> Hello {
        self.encrypts = encrypts;
        self
    }

    pub(crate) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8..10].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        out[10] = self.endian;
        out[11] = self.kind;
        out[12] = u8::from(self.encrypts);
        out[13..17].copy_from_slice(&self.rank.to_le_bytes());
        out[17..21].copy_from_slice(&self.size.to_le_bytes());
        out[21..].copy_from_slice(&self.nonce);
        out
    }

    pub(crate) fn decode(bytes: &[u8; HELLO_LEN]) -> Result<Hello, PrefixError> {
        let mut prefix = [0u8; PREFIX_LEN];
        prefix.copy_from_slice(&bytes[..PREFIX_LEN]);
        check_prefix(&prefix)?;
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&bytes[21..]);
        Ok(Hello {
            endian: bytes[10],
            kind: bytes[11],
            encrypts: bytes[12] != 0,
            rank: u32_at(13),
            size: u32_at(17),
            nonce,
        })
    }
}

/// Which collective a header opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Allreduce,
    Barrier,
    Allgather,
    Broadcast,
    Alltoall,
    Reducescatter,
    GroupedAllreduce,
    /// The engine's control plane (`collectives::control`).
    Gather,
    BitwiseAnd,
    /// The header check of a large job's collectives (`collectives::agree`).
    Agree,
    /// The control plane's broadcast from rank 0 (`collectives::control`).
    Fanout,
}

impl Kind {
    const ALL: [Kind; 11] = [
        Kind::Allreduce,
        Kind::Barrier,
        Kind::Allgather,
        Kind::Broadcast,
        Kind::Alltoall,
        Kind::Reducescatter,
        Kind::GroupedAllreduce,
        Kind::Gather,
        Kind::BitwiseAnd,
        Kind::Agree,
        Kind::Fanout,
    ];

    fn code(self) -> u8 {
        match self {
            Kind::Allreduce => 1,
            Kind::Barrier => 2,
            Kind::Allgather => 3,
            Kind::Broadcast => 4,
            Kind::Alltoall => 5,
            Kind::Reducescatter => 6,
            Kind::GroupedAllreduce => 7,
            Kind::Gather => 8,
            Kind::BitwiseAnd => 9,
            Kind::Agree => 10,
            Kind::Fanout => 11,
        }
    }

    /// The name in messages, also used as the "during" of I/O errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Allreduce => "allreduce",
            Kind::Barrier => "barrier",
            Kind::Allgather => "allgather",
            Kind::Broadcast => "broadcast",
            Kind::Alltoall => "alltoall",
            Kind::Reducescatter => "reducescatter",
            Kind::GroupedAllreduce => "grouped allreduce",
            Kind::Gather => "gather",
            Kind::BitwiseAnd => "bitwise and",
            Kind::Agree => "header check",
            Kind::Fanout => "fan-out",
        }
    }
}

/// The header that opens a collective on a connection. Both ends send theirs
/// and require the other's to be byte-for-byte equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// Number of collectives this communicator ran before this one.
    pub seq: u64,
    pub kind: u8,
    /// Element type code (0 for a barrier).
    pub dtype: u8,
    /// Reduce-operation code (0 for a barrier and for collectives that do
    /// not reduce).
    pub op: u8,
    /// Kind-specific: the root of a broadcast, the number of tensors of a
    /// grouped allreduce, 0 otherwise.
    pub aux: u32,
    /// Number of elements (0 for a barrier, and for allgather and alltoall,
    /// whose ranks contribute different counts).
    pub count: u64,
}

impl Header {
    pub(crate) fn allreduce(seq: u64, dtype: u8, op: ReduceOp, count: usize) -> Header {
        Header::new(seq, Kind::Allreduce, dtype, Some(op), count, 0)
    }

    pub(crate) fn barrier(seq: u64) -> Header {
        Header::new(seq, Kind::Barrier, 0, None, 0, 0)
    }

    /// A header of any kind.
    pub(crate) fn new(
        seq: u64,
        kind: Kind,
        dtype: u8,
        op: Option<ReduceOp>,
        count: usize,
        aux: u32,
    ) -> Header {
        Header {
            seq,
            kind: kind.code(),
            dtype,
            op: op.map_or(0, ReduceOp::code),
            aux,
            count: count as u64,
        }
    }

    fn kind(&self) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.code() == self.kind)
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8] = self.kind;
        out[9] = self.dtype;
        out[10] = self.op;
        // out[11] is reserved and zero.
        out[12..16].copy_from_slice(&self.aux.to_le_bytes());
        out[16..].copy_from_slice(&self.count.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8; HEADER_LEN]) -> Header {
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        Header {
            seq: u64_at(0),
            kind: bytes[8],
            dtype: bytes[9],
            op: bytes[10],
            aux: u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
            count: u64_at(16),
        }
    }

    /// E.g. "allreduce of 10 f32 (SUM) as collective #3".
    pub(crate) fn describe(&self) -> String {
        let dtype = || {
            type_name(self.dtype).map_or_else(|| format!("type #{}", self.dtype), str::to_string)
        };
        let op = || {
            ReduceOp::from_code(self.op)
                .map_or_else(|| format!("op #{}", self.op), |op| op.name().to_string())
        };
        let what = match self.kind() {
            Some(Kind::Barrier) => "barrier".to_string(),
            Some(kind @ (Kind::Allreduce | Kind::Reducescatter)) => {
                format!("{} of {} {} ({})", kind.name(), self.count, dtype(), op())
            }
            Some(kind @ (Kind::Allgather | Kind::Alltoall | Kind::Gather)) => {
                format!("{} of {}", kind.name(), dtype())
            }
            Some(Kind::BitwiseAnd) => format!("bitwise and of {} 64-bit words", self.count),
            Some(Kind::Agree) => "a collective's header check".to_string(),
            Some(Kind::Fanout) => "the fan-out of rank 0's list of hosts".to_string(),
            Some(Kind::Broadcast) => format!(
                "broadcast of {} {} from rank {}",
                self.count,
                dtype(),
                self.aux
            ),
            Some(Kind::GroupedAllreduce) => format!(
                "grouped allreduce of {} tensors, {} {} in all ({})",
                self.aux,
                self.count,
                dtype(),
                op()
            ),
            None => format!("unknown collective #{}", self.kind),
        };
        format!("{what} as collective #{}", self.seq)
    }
}

/// Requires the header `bytes` received from rank `from` to equal `ours`.
pub(crate) fn check_header(from: usize, bytes: &[u8; HEADER_LEN], ours: &Header) -> Result<()> {
    let theirs = Header::decode(bytes);
    if theirs != *ours {
        return Err(mismatch(from, &theirs, ours));
    }
    Ok(())
}

/// The error of a rank that called `theirs` where this one called `ours`.
pub(crate) fn mismatch(rank: usize, theirs: &Header, ours: &Header) -> Error {
    Error::Mismatch {
        rank,
        detail: format!(
            "it called {} while this rank called {}",
            theirs.describe(),
            ours.describe()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips() {
        let hello = Hello::new(3, 4, [7u8; NONCE_LEN]);
        let bytes = hello.encode();
        assert_eq!(bytes[..8], MAGIC);
        assert_eq!(bytes[11], 0, "a rank's hello is that of earlier builds");
        assert_eq!(Hello::decode(&bytes), Ok(hello));
        let service = Hello::of_kind(KIND_SERVICE, 0, 4, [7u8; NONCE_LEN]);
        assert_eq!(Hello::decode(&service.encode()), Ok(service));
        assert_eq!(kind_name(KIND_SERVICE), "the driver's rendezvous service");
        assert_eq!(kind_name(9), "an endpoint of unknown kind");
    }

    #[test]
    fn hello_prefix_errors() {
        let mut bytes = Hello::new(0, 2, [0u8; NONCE_LEN]).encode();
        bytes[8..10].copy_from_slice(&99u16.to_le_bytes());
        assert_eq!(Hello::decode(&bytes), Err(PrefixError::Version(99)));
        bytes[0] = b'X';
        assert_eq!(Hello::decode(&bytes), Err(PrefixError::BadMagic));
    }

    #[test]
    fn header_round_trips_and_describes() {
        let header = Header::allreduce(3, 1, ReduceOp::Sum, 10);
        assert_eq!(Header::decode(&header.encode()), header);
        assert_eq!(
            header.describe(),
            "allreduce of 10 f32 (SUM) as collective #3"
        );
        assert_eq!(Header::barrier(0).describe(), "barrier as collective #0");
        assert_ne!(Header::barrier(0).encode(), Header::barrier(1).encode());
        let broadcast = Header::new(5, Kind::Broadcast, 2, None, 7, 3);
        assert_eq!(Header::decode(&broadcast.encode()), broadcast);
        assert_eq!(
            broadcast.describe(),
            "broadcast of 7 f64 from rank 3 as collective #5"
        );
        let grouped = Header::new(1, Kind::GroupedAllreduce, 7, Some(ReduceOp::Max), 9, 2);
        assert_eq!(
            grouped.describe(),
            "grouped allreduce of 2 tensors, 9 f16 in all (MAX) as collective #1"
        );
        let gather = Header::new(0, Kind::Allgather, 5, None, 0, 0);
        assert_eq!(gather.describe(), "allgather of u8 as collective #0");
    }
}

/// Property tests: hellos and headers come straight off sockets.
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::handshake::version_mismatch;
    use proptest::array::uniform;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_hello_bytes_decode_or_name_the_problem(
            mut bytes in uniform::<_, HELLO_LEN>(any::<u8>()),
            magic in any::<bool>(),
        ) {
            // Half the cases carry our magic, so the version check is reached.
            if magic {
                bytes[..8].copy_from_slice(&MAGIC);
            }
            let version = u16::from_le_bytes([bytes[8], bytes[9]]);
            match Hello::decode(&bytes) {
                Ok(hello) => {
                    prop_assert_eq!(version, PROTOCOL_VERSION);
                    prop_assert_eq!(hello.encode(), bytes);
                }
                Err(error) => {
                    let message = version_mismatch("peer".into(), error).to_string();
                    if bytes[..8] != MAGIC {
                        prop_assert_eq!(error, PrefixError::BadMagic);
                        prop_assert!(message.contains("not answer with a horovod-rs hello"), "{}", message);
                    } else {
                        prop_assert_eq!(error, PrefixError::Version(version));
                        let named = format!("protocol version {version}");
                        prop_assert!(message.contains(&named), "{}", message);
                    }
                }
            }
        }

        #[test]
        fn hellos_round_trip(
            endian in any::<u8>(),
            kind in any::<u8>(),
            encrypts in any::<bool>(),
            rank in any::<u32>(),
            size in any::<u32>(),
            nonce in uniform::<_, NONCE_LEN>(any::<u8>()),
        ) {
            let hello = Hello { endian, kind, encrypts, rank, size, nonce };
            prop_assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
            prop_assert!(!kind_name(kind).is_empty() && !endian_name(endian).is_empty());
        }

        #[test]
        fn any_header_bytes_decode_and_describe(bytes in uniform::<_, HEADER_LEN>(any::<u8>())) {
            let header = Header::decode(&bytes);
            let mut canonical = bytes;
            canonical[11] = 0; // reserved
            prop_assert_eq!(header.encode(), canonical);
            let described = header.describe();
            let seq = format!("as collective #{}", header.seq);
            prop_assert!(described.ends_with(&seq), "{}", described);
        }

        #[test]
        fn headers_round_trip(
            seq in any::<u64>(),
            kind in 0..Kind::ALL.len(),
            dtype in any::<u8>(),
            op in proptest::option::of(0..5u8),
            count in any::<usize>(),
            aux in any::<u32>(),
        ) {
            let op = op.and_then(|code| ReduceOp::from_code(code + 1));
            let header = Header::new(seq, Kind::ALL[kind], dtype, op, count, aux);
            prop_assert_eq!(Header::decode(&header.encode()), header);
        }
    }
}
