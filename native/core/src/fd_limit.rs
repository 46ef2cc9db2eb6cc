//! The file descriptors a rank's full mesh needs, checked before it opens
//! any link.
//!
//! A rank opens its links on first use (`crate::mesh`): log2 N of them for
//! most jobs, but a collective that talks to every rank (alltoall) opens all
//! N - 1, on top of what the process already has open, and each handshake
//! the acceptor has in hand holds a duplicate of its socket. Past the
//! process's `RLIMIT_NOFILE` such a collective would fail deep inside an
//! `accept` or `connect` with "Too many open files", after other ranks have
//! started waiting on this one; checked at join, the job fails there naming
//! the limit and how to raise it. As many servers do, the soft limit is
//! first raised to the hard one when that is enough (logged).

use std::io;

use log::info;

use libc::{rlim_t, RLIM_INFINITY};

use crate::error::{Error, Result};

/// Descriptors kept free beyond the mesh: the shared-memory segment, the
/// rendezvous service's connection, the acceptor's doorbell (two), a log
/// file.
const SPARE: rlim_t = 16;

/// Makes sure this process may open the links of a `size`-rank mesh while
/// its acceptor holds up to `handshakes` dials in their handshake, raising
/// the soft limit to the hard one if that suffices.
///
/// # Errors
/// `Io` (too many open files) naming the limit, the descriptors the mesh
/// needs and how to raise the limit, when even the hard limit is too low.
pub(crate) fn ensure_room_for_mesh(size: usize, handshakes: usize) -> Result<()> {
    let Some((soft, hard)) = limits() else {
        return Ok(()); // No limit to read: the sockets' own errors will say.
    };
    let open = open_descriptors();
    let links = size.saturating_sub(1) as rlim_t;
    // Each handshake in hand holds an accepted socket and its duplicate.
    let in_handshakes = 2 * handshakes as rlim_t;
    let needed = open + links + in_handshakes + SPARE;
    if needed <= soft {
        return Ok(());
    }
    if needed <= hard && raise_soft(needed, hard) {
        info!(
            "raised the soft file-descriptor limit (RLIMIT_NOFILE) from {soft} to its hard limit {}: \
             a job of {size} ranks may hold {links} connections per rank",
            shown(hard)
        );
        return Ok(());
    }
    Err(Error::Io {
        context: format!(
            "a job of {size} ranks needs {needed} file descriptors on this rank ({links} connections \
             of the full mesh, which a collective such as alltoall opens, {in_handshakes} for \
             handshakes in progress, {open} open already, {SPARE} spare), \
             more than the process's limit \
             RLIMIT_NOFILE allows (soft {soft}, hard {}); raise the hard limit to at least {needed} \
             where the ranks start (`ulimit -n {needed}` in the launching shell, `LimitNOFILE=` of a \
             systemd unit, `nofile` in /etc/security/limits.conf) or run fewer ranks",
            shown(hard)
        ),
        source: io::Error::from_raw_os_error(libc::EMFILE),
    })
}

/// The soft and hard `RLIMIT_NOFILE`.
fn limits() -> Option<(rlim_t, rlim_t)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (status == 0).then_some((limit.rlim_cur, limit.rlim_max))
}

fn shown(limit: rlim_t) -> String {
    if limit == RLIM_INFINITY {
        "unlimited".into()
    } else {
        limit.to_string()
    }
}

/// Sets the soft limit to the hard one (to `needed` when the hard one is
/// unlimited: the kernel caps descriptors at `fs.nr_open` anyway).
fn raise_soft(needed: rlim_t, hard: rlim_t) -> bool {
    let limit = libc::rlimit {
        rlim_cur: if hard == RLIM_INFINITY { needed } else { hard },
        rlim_max: hard,
    };
    // SAFETY: `limit` is a valid rlimit; only this process's limit changes.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 }
}

/// Descriptors this process has open now (0 where /proc is not mounted).
fn open_descriptors() -> rlim_t {
    std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count() as rlim_t)
}
