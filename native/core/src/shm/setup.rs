//! Deciding at connect whether a communicator uses shared memory, and
//! setting the segment up.
//!
//! Runs on every communicator of more than one rank whose ranks are all on
//! one host, over the authenticated links, whatever the configuration, so
//! that ranks configured differently agree instead of waiting for each other
//! (ranks on several hosts all know from the hosts' list that it is TCP):
//! 1. every rank but 0 → rank 0: one byte, 1 if it wants shared memory
//!    (transport `Auto`);
//! 2. rank 0 → each: the segment's name (u8 length, bytes; length 0 for
//!    TCP), if all want it and rank 0 could create it;
//! 3. each → rank 0: one byte, 1 if it mapped the segment;
//! 4. rank 0 unlinks the name, then → each: one byte, 1 if all mapped it.
//!
//! Invariant: rank 0 unlinks the name before step 4 on every path (a guard
//! does it on errors), so once `connect` returns nothing is left in
//! `/dev/shm`, whatever happens to the processes afterwards.

use log::{debug, warn};

use super::segment::{unlink, Segment};
use super::{ShmTransport, SLOT_BYTES};
use crate::config::{CommConfig, TransportPolicy};
use crate::error::Result;
use crate::mesh::Mesh;

const DURING: &str = "shared memory setup";

/// Removes the segment's name when dropped.
struct Unlink(String);

impl Drop for Unlink {
    fn drop(&mut self) {
        unlink(&self.0);
    }
}

/// Agrees with all ranks on the transport; returns the shared memory
/// transport if every rank mapped the segment, `None` for TCP. With shared
/// memory every link of `mesh` is open on return: waits in the segment
/// watch every peer's connection.
pub(crate) fn negotiate(
    rank: usize,
    mesh: &Mesh,
    hosts: &[String],
    config: &CommConfig,
) -> Result<Option<ShmTransport>> {
    let transport = agree(rank, mesh, hosts, config)?;
    if transport.is_some() {
        mesh.open_all()?;
    }
    Ok(transport)
}

fn agree(
    rank: usize,
    mesh: &Mesh,
    hosts: &[String],
    config: &CommConfig,
) -> Result<Option<ShmTransport>> {
    let size = hosts.len();
    if hosts.iter().any(|h| *h != hosts[0]) {
        // No rank wants it, and every rank knows: nothing to agree on.
        return Ok(None);
    }
    let wants = config.transport != TransportPolicy::Tcp;
    let link = |peer: usize| mesh.link(peer);
    if rank != 0 {
        let to_root = link(0)?;
        to_root.send(&[u8::from(wants)], DURING)?;
        let mut len = [0u8; 1];
        to_root.recv(&mut len, DURING)?;
        if len[0] == 0 {
            return Ok(None);
        }
        let mut name = vec![0u8; usize::from(len[0])];
        to_root.recv(&mut name, DURING)?;
        let mapped = match std::str::from_utf8(&name) {
            Ok(name) => Segment::open(name, size, SLOT_BYTES).map_err(|e| e.to_string()),
            Err(_) => Err("the segment name is not UTF-8".to_string()),
        };
        if let Err(why) = &mapped {
            warn!("rank {rank}: cannot map the shared memory segment, using TCP: {why}");
        }
        to_root.send(&[u8::from(mapped.is_ok())], DURING)?;
        let mut all = [0u8; 1];
        to_root.recv(&mut all, DURING)?;
        return Ok(match (mapped, all[0]) {
            (Ok(segment), 1) => Some(ShmTransport::new(segment, rank, size, config.io_timeout)),
            _ => None,
        });
    }

    let mut all_want = wants;
    for peer in 1..size {
        let mut byte = [0u8; 1];
        link(peer)?.recv(&mut byte, DURING)?;
        all_want &= byte[0] == 1;
    }
    let created = if all_want {
        match Segment::create(size, SLOT_BYTES) {
            Ok((segment, name)) => Some((segment, Unlink(name))),
            Err(e) => {
                warn!("cannot create a shared memory segment, using TCP: {e}");
                None
            }
        }
    } else {
        None
    };
    let name = created.as_ref().map_or(&[][..], |(_, n)| n.0.as_bytes());
    let mut message = vec![name.len() as u8];
    message.extend_from_slice(name);
    for peer in 1..size {
        link(peer)?.send(&message, DURING)?;
    }
    let Some((segment, name)) = created else {
        return Ok(None);
    };
    let mut all_mapped = true;
    for peer in 1..size {
        let mut byte = [0u8; 1];
        link(peer)?.recv(&mut byte, DURING)?;
        all_mapped &= byte[0] == 1;
    }
    drop(name);
    for peer in 1..size {
        link(peer)?.send(&[u8::from(all_mapped)], DURING)?;
    }
    debug!("ranks on one host; shared memory transport: {all_mapped}");
    Ok(all_mapped.then(|| ShmTransport::new(segment, 0, size, config.io_timeout)))
}
