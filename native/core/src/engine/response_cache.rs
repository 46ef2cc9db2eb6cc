//! The response cache: tensors negotiated before, agreed on with one bit.
//!
//! Training submits the same tensors (same names, same metadata) every step.
//! After a name has been negotiated once, its [`ReadyResponse`] is kept here
//! at a fixed position; in later cycles a rank that has the tensor ready sets
//! that position's bit, and one bitwise AND across ranks tells every rank
//! which cached tensors are ready everywhere, replacing the full negotiation
//! (Horovod's `response_cache`).
//!
//! Invariant: every rank's cache holds the same responses at the same
//! positions. It changes only through [`ResponseCache::put`],
//! [`ResponseCache::touch`] and [`ResponseCache::erase`], which every rank
//! calls with the same arguments in the same order (for responses every rank
//! executes and invalidations every rank agreed on), and eviction depends only
//! on that history.

use std::collections::HashMap;

use super::message::ReadyResponse;
use super::request::{Operation, TensorMeta};

/// How a rank's new request relates to the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Cached with metadata equal to the request's, at this position.
    Hit(usize),
    /// Cached under this name with other metadata: the entry is stale.
    Conflict(usize),
    /// Not cached.
    Miss,
}

#[derive(Debug)]
struct Entry {
    response: ReadyResponse,
    last_used: u64,
}

/// Responses by position, least recently used evicted first.
#[derive(Debug)]
pub(crate) struct ResponseCache {
    capacity: usize,
    entries: Vec<Option<Entry>>,
    by_name: HashMap<String, usize>,
    /// Counter standing in for time in the LRU order.
    clock: u64,
}

impl ResponseCache {
    /// A cache of at most `capacity` responses; 0 disables caching.
    pub fn new(capacity: usize) -> ResponseCache {
        ResponseCache {
            capacity,
            entries: Vec::new(),
            by_name: HashMap::new(),
            clock: 0,
        }
    }

    /// Number of positions, the length of the bit vectors.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether responses like this one are cached. Alltoall splits change
    /// from step to step, so caching them would only churn the cache; a
    /// join's response is a one-off that carries the last rank to join.
    pub fn is_cacheable(response: &ReadyResponse) -> bool {
        !matches!(
            response.meta.operation,
            Operation::Alltoall { .. } | Operation::Join
        )
    }

    /// How `meta`, submitted on `rank`, relates to the cache.
    pub fn lookup(&self, rank: usize, meta: &TensorMeta) -> Lookup {
        let Some(&position) = self.by_name.get(&meta.name) else {
            return Lookup::Miss;
        };
        match self.get(position) {
            Some(cached) if matches(cached, rank, meta) => Lookup::Hit(position),
            Some(_) => Lookup::Conflict(position),
            None => Lookup::Miss,
        }
    }

    /// The response at `position`, if any.
    pub fn get(&self, position: usize) -> Option<&ReadyResponse> {
        self.entries
            .get(position)
            .and_then(Option::as_ref)
            .map(|e| &e.response)
    }

    /// Stores `response` (replacing an entry of the same name), evicting the
    /// least recently used entry when full. Returns the position used.
    pub fn put(&mut self, response: ReadyResponse) -> Option<usize> {
        if self.capacity == 0 || !Self::is_cacheable(&response) {
            return None;
        }
        self.clock += 1;
        let position = match self.by_name.get(&response.meta.name) {
            Some(&p) => p,
            None if self.entries.len() < self.capacity => {
                self.entries.push(None);
                self.entries.len() - 1
            }
            None => match self.entries.iter().position(Option::is_none) {
                Some(free) => free,
                None => {
                    let lru = self.least_recently_used()?;
                    self.erase(lru);
                    lru
                }
            },
        };
        self.by_name.insert(response.meta.name.clone(), position);
        self.entries[position] = Some(Entry {
            response,
            last_used: self.clock,
        });
        Some(position)
    }

    /// Marks the entry at `position` as just used.
    pub fn touch(&mut self, position: usize) {
        self.clock += 1;
        if let Some(Some(entry)) = self.entries.get_mut(position) {
            entry.last_used = self.clock;
        }
    }

    /// Removes the entry at `position`.
    pub fn erase(&mut self, position: usize) {
        if let Some(slot) = self.entries.get_mut(position) {
            if let Some(entry) = slot.take() {
                self.by_name.remove(&entry.response.meta.name);
            }
        }
    }

    fn least_recently_used(&self) -> Option<usize> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(p, e)| e.as_ref().map(|e| (e.last_used, p)))
            .min()
            .map(|(_, p)| p)
    }
}

/// Whether `cached` is the response `meta` on `rank` would negotiate to.
fn matches(cached: &ReadyResponse, rank: usize, meta: &TensorMeta) -> bool {
    let theirs = &cached.meta;
    if theirs.name != meta.name || theirs.dtype != meta.dtype || theirs.operation != meta.operation
    {
        return false;
    }
    match meta.operation {
        // Ranks differ in the first dimension, which the response records.
        Operation::Allgather => {
            theirs.shape.get(1..) == meta.shape.get(1..)
                && cached.first_dims.get(rank) == meta.shape.first()
        }
        _ => theirs.shape == meta.shape,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DataType;
    use crate::reduce::ReduceOp;

    fn response(name: &str, len: usize) -> ReadyResponse {
        ReadyResponse {
            meta: TensorMeta {
                name: name.into(),
                operation: Operation::allreduce(ReduceOp::Sum),
                dtype: DataType::F32,
                shape: vec![len],
                on_device: false,
            },
            first_dims: Vec::new(),
        }
    }

    #[test]
    fn hits_conflicts_and_misses() {
        let mut cache = ResponseCache::new(4);
        assert_eq!(cache.put(response("a", 3)), Some(0));
        assert_eq!(cache.put(response("b", 3)), Some(1));
        assert_eq!(cache.lookup(0, &response("a", 3).meta), Lookup::Hit(0));
        assert_eq!(cache.lookup(0, &response("b", 4).meta), Lookup::Conflict(1));
        assert_eq!(cache.lookup(0, &response("c", 3).meta), Lookup::Miss);
        cache.erase(1);
        assert_eq!(cache.lookup(0, &response("b", 3).meta), Lookup::Miss);
        assert_eq!(cache.put(response("c", 1)), Some(2));
        assert_eq!(cache.put(response("d", 1)), Some(3));
        assert_eq!(cache.put(response("e", 1)), Some(1), "reuses the free slot");
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let mut cache = ResponseCache::new(2);
        cache.put(response("a", 1));
        cache.put(response("b", 1));
        cache.touch(0);
        assert_eq!(cache.put(response("c", 1)), Some(1));
        assert_eq!(cache.lookup(0, &response("b", 1).meta), Lookup::Miss);
        assert_eq!(cache.lookup(0, &response("a", 1).meta), Lookup::Hit(0));
        assert_eq!(cache.put(response("a", 2)), Some(0), "replaces in place");
    }

    #[test]
    fn allgather_entries_match_each_ranks_first_dimension() {
        let mut cache = ResponseCache::new(2);
        let mut gathered = response("g", 0);
        gathered.meta.operation = Operation::Allgather;
        gathered.meta.shape = vec![2, 5];
        gathered.first_dims = vec![2, 7];
        cache.put(gathered.clone());
        let mut mine = gathered.meta.clone();
        mine.shape = vec![7, 5];
        assert_eq!(cache.lookup(1, &mine), Lookup::Hit(0));
        assert_eq!(cache.lookup(0, &mine), Lookup::Conflict(0));
        let disabled = ResponseCache::new(0);
        assert_eq!(disabled.lookup(0, &mine), Lookup::Miss);
    }
}
