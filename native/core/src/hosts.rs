//! Which host each rank is on: ranks of one host share memory and count
//! together in local and cross ranks; ranks of different hosts talk TCP.
//!
//! A rank's host is the host part of its address unless Horovod's
//! `HOROVOD_HOSTNAME` names it (a launcher sets it per rank, an executor
//! inherits it from its worker's environment). Ranks with one address may
//! so sit on different hosts, e.g. simulated hosts on one machine.
//!
//! Every rank learns every rank's host as the job joins: the names go to
//! rank 0 along a binomial tree and the list comes back along it, so a rank
//! talks to at most log2 N + 1 others (rank 0 does not hear from every rank
//! directly).

use crate::communicator::Communicator;
use crate::error::{Error, Result};

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
/// the caller, [`refusal`]). Every rank calls it at the same point, as the
/// first collectives of `comm`.
pub(crate) fn exchange(comm: &mut Communicator, mine: &str) -> Result<Vec<String>> {
    let size = comm.size();
    let list = comm
        .gather_to_root(mine.as_bytes())?
        .map(|names| names_list(&names))
        .transpose()?;
    let list = comm.fan_out_from_root(list)?;
    let hosts = decode(&list).ok_or_else(|| Error::ControlMessage {
        detail: format!("rank 0 sent a garbled list of hosts during {DURING}"),
    })?;
    if hosts.len() != size {
        return Err(Error::ControlMessage {
            detail: format!(
                "rank 0 sent {} hosts for {size} ranks during {DURING}",
                hosts.len()
            ),
        });
    }
    Ok(hosts)
}

/// The gathered names as one list: a length byte and the bytes of each.
fn names_list(names: &[Vec<u8>]) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for (rank, name) in names.iter().enumerate() {
        let refused = match std::str::from_utf8(name) {
            Ok(name) => refusal(name),
            Err(_) => Some("its host name is not UTF-8".into()),
        };
        if let Some(why) = refused {
            return Err(Error::Mismatch { rank, detail: why });
        }
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name);
    }
    Ok(bytes)
}

fn decode(mut bytes: &[u8]) -> Option<Vec<String>> {
    let mut names = Vec::new();
    while let Some((&len, rest)) = bytes.split_first() {
        let name = rest.get(..usize::from(len))?;
        names.push(String::from_utf8(name.to_vec()).ok()?);
        bytes = &rest[usize::from(len)..];
    }
    Some(names)
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
