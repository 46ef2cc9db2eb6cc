//! Mutual HMAC-SHA256 challenge–response over the per-job secret.
//!
//! Both sides of a connection send a hello carrying a fresh random nonce. The
//! transcript is the connector's hello followed by the acceptor's hello; each
//! side proves it knows the secret with `HMAC(secret, role label ‖
//! transcript)`. Invariant: a proof is bound to both nonces and to the role
//! that made it, so it can be neither replayed on another connection nor
//! reflected back at its sender. Proofs are compared in constant time
//! (`hmac`'s `verify_slice`).

use hmac::{Hmac, Mac};
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::Sha256;

use crate::error::{Error, Result};

type HmacSha256 = Hmac<Sha256>;

/// Length of a proof in bytes.
pub(crate) const TAG_LEN: usize = 32;
/// Length of a handshake nonce in bytes.
pub(crate) const NONCE_LEN: usize = 32;

/// Which end of a connection makes a proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The rank whose listener accepted the connection.
    Acceptor,
    /// The rank that opened the connection.
    Connector,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Acceptor => b"horovod-rs/1 acceptor proof",
            Role::Connector => b"horovod-rs/1 connector proof",
        }
    }
}

/// The job secret, keyed once for HMAC.
#[derive(Clone)]
pub(crate) struct Secret {
    keyed: HmacSha256,
}

impl Secret {
    /// Keys HMAC with `secret`, which must not be empty.
    pub(crate) fn new(secret: &[u8]) -> Result<Secret> {
        if secret.is_empty() {
            return Err(Error::InvalidArgument("the job secret is empty".into()));
        }
        let keyed = HmacSha256::new_from_slice(secret).map_err(|_| {
            Error::InvalidArgument("the job secret cannot be used as an HMAC key".into())
        })?;
        Ok(Secret { keyed })
    }

    fn mac(&self, role: Role, transcript: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(role.label());
        mac.update(transcript);
        mac
    }

    /// The proof `role` sends for `transcript`.
    pub(crate) fn prove(&self, role: Role, transcript: &[u8]) -> [u8; TAG_LEN] {
        self.mac(role, transcript).finalize().into_bytes().into()
    }

    /// Whether `tag` is `role`'s valid proof for `transcript` (constant time).
    pub(crate) fn verify(&self, role: Role, transcript: &[u8], tag: &[u8]) -> bool {
        self.mac(role, transcript).verify_slice(tag).is_ok()
    }

    /// A key for `purpose`, derived from the secret (HMAC as a PRF, RFC
    /// 2104): any holder of the secret gets the same, nobody else can.
    pub(crate) fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        mac.update(purpose);
        mac.finalize().into_bytes().into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A fresh nonce from the operating system's random source.
pub(crate) fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut nonce = [0u8; NONCE_LEN];
    OsRng
        .try_fill_bytes(&mut nonce)
        .map_err(|e| Error::io("generating a handshake nonce", std::io::Error::other(e)))?;
    Ok(nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proof_verifies_with_same_secret_role_and_transcript() {
        let secret = Secret::new(b"job secret").unwrap();
        let tag = secret.prove(Role::Connector, b"transcript");
        assert!(secret.verify(Role::Connector, b"transcript", &tag));
    }

    #[test]
    fn proof_fails_with_other_secret() {
        let tag = Secret::new(b"job secret")
            .unwrap()
            .prove(Role::Acceptor, b"t");
        let other = Secret::new(b"job secreT").unwrap();
        assert!(!other.verify(Role::Acceptor, b"t", &tag));
    }

    #[test]
    fn proof_is_bound_to_role_and_transcript() {
        let secret = Secret::new(b"s").unwrap();
        let tag = secret.prove(Role::Acceptor, b"transcript");
        assert!(!secret.verify(Role::Connector, b"transcript", &tag));
        assert!(!secret.verify(Role::Acceptor, b"transcripT", &tag));
        assert!(!secret.verify(Role::Acceptor, b"transcript", &tag[..31]));
        assert!(!secret.verify(Role::Acceptor, b"transcript", &[0u8; TAG_LEN]));
    }

    #[test]
    fn empty_secret_is_refused() {
        let err = Secret::new(b"").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
