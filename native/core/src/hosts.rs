//! Which host each rank is on: ranks of one host share memory and count
//! together in local and cross ranks; ranks of different hosts talk TCP.
//!
//! A rank's host is the host part of its address unless Horovod's
//! `HOROVOD_HOSTNAME` names it (a launcher sets it per rank, an executor
//! inherits it from its worker's environment). Ranks with one address may
//! so sit on different hosts, e.g. simulated hosts on one machine.
//!
//! Every rank learns every rank's host once its links are up: each rank but
//! 0 sends its own to rank 0, which sends the list back. Only links to rank
//! 0 are used, so the exchange costs one round trip per rank.

use crate::error::{Error, Result};
use crate::link::Link;

/// Horovod's variable naming a rank's host.
pub const HOSTNAME_VARIABLE: &str = "HOROVOD_HOSTNAME";

/// Longest host name, in bytes (a length byte on the wire, as DNS allows).
const MAX_LEN: usize = 255;

const DURING: &str = "the exchange of host names";

/// Why `name` cannot name a host, if it cannot.
pub(crate) fn refusal(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("a host name cannot be empty".into())
    } else if name.len() > MAX_LEN {
        Some(format!("a host name has at most {MAX_LEN} bytes"))
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(format!(
            "a host name has no spaces or control characters: {name:?}"
        ))
    } else {
        None
    }
}

/// Every rank's host, in rank order, with `mine` this rank's (checked by
/// the caller, [`refusal`]). Every rank calls it at the same point, right
/// after its links are up.
pub(crate) fn exchange(rank: usize, links: &[Option<Link>], mine: &str) -> Result<Vec<String>> {
    let link = |peer: usize| {
        links[peer].as_ref().ok_or_else(|| Error::Unusable {
            cause: format!("rank {rank} has no connection to rank {peer}"),
        })
    };
    if rank != 0 {
        link(0)?.send(&encode(&[mine]), DURING)?;
        let mut count = [0u8; 4];
        link(0)?.recv(&mut count, DURING)?;
        return (0..u32::from_le_bytes(count))
            .map(|_| receive(link(0)?))
            .collect();
    }
    let mut hosts = vec![mine.to_string()];
    for peer in 1..links.len() {
        let mut count = [0u8; 4];
        link(peer)?.recv(&mut count, DURING)?;
        if u32::from_le_bytes(count) != 1 {
            return Err(Error::Mismatch {
                rank: peer,
                detail: format!("it sent {DURING} out of turn"),
            });
        }
        hosts.push(receive(link(peer)?)?);
    }
    let list = encode(&hosts.iter().map(String::as_str).collect::<Vec<_>>());
    for peer in 1..links.len() {
        link(peer)?.send(&list, DURING)?;
    }
    Ok(hosts)
}

/// `names` as a count (u32) and each name as a length byte and its bytes.
fn encode(names: &[&str]) -> Vec<u8> {
    let mut bytes = (names.len() as u32).to_le_bytes().to_vec();
    for name in names {
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name.as_bytes());
    }
    bytes
}

fn receive(link: &Link) -> Result<String> {
    let mut len = [0u8; 1];
    link.recv(&mut len, DURING)?;
    let mut name = vec![0u8; usize::from(len[0])];
    link.recv(&mut name, DURING)?;
    String::from_utf8(name).map_err(|_| Error::Mismatch {
        rank: link.rank(),
        detail: "its host name is not UTF-8".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_host_names_are_refused_saying_why() {
        assert_eq!(refusal("node-1.example.com"), None);
        assert!(refusal("").unwrap().contains("empty"));
        assert!(refusal("a b").unwrap().contains("no spaces"));
        assert!(refusal(&"h".repeat(256))
            .unwrap()
            .contains("at most 255 bytes"));
    }
}
