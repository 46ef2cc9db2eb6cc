//! A rank's end of a full mesh: a link to every other rank, by rank. What
//! the TCP algorithms run on.

use crate::error::{Error, Result};
use crate::link::Link;

/// Links to every rank but this one.
#[derive(Debug)]
pub(crate) struct Mesh {
    rank: usize,
    /// `links[r]` is the connection to rank `r`; `None` at this rank's index.
    links: Vec<Option<Link>>,
}

impl Mesh {
    /// The mesh of `rank` over `links`, which holds a link for every rank
    /// but `rank`.
    pub(crate) fn new(rank: usize, links: Vec<Option<Link>>) -> Mesh {
        debug_assert!(rank < links.len() && links[rank].is_none());
        Mesh { rank, links }
    }

    /// This rank, in `0..size`.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks the mesh joins.
    pub(crate) fn size(&self) -> usize {
        self.links.len()
    }

    /// The link to `rank`.
    pub(crate) fn link(&self, rank: usize) -> Result<&Link> {
        self.links
            .get(rank)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Unusable {
                cause: format!("rank {} has no connection to rank {rank}", self.rank),
            })
    }

    /// Every rank's link, `None` at this rank's index.
    pub(crate) fn links(&self) -> &[Option<Link>] {
        &self.links
    }

    /// Shuts every link down, so peers blocked on this rank fail at once.
    pub(crate) fn shutdown(&self) {
        for link in self.links.iter().flatten() {
            link.shutdown();
        }
    }
}
