//! Collectives through shared memory, for communicators whose ranks all run
//! on one host: the way MPI beats TCP on one machine.
//!
//! The ranks map one [`segment::Segment`] (set up at connect by
//! [`setup::negotiate`]). Each rank owns two data slots in it and a progress
//! counter. A collective is a sequence of *phases*: a rank does its part of a
//! phase, then increments its counter ("signals") and waits until every
//! rank's counter has reached the same value.
//!
//! Allreduce works chunk by chunk (a chunk fills a slot):
//! 1. every rank copies its chunk into its slot and signals;
//! 2. rank `r` reduces part `r` of the chunk (a [`segment`] of it) reading
//!    that part of every rank's slot, into its own slot, and signals;
//! 3. every rank copies each part from the slot of the rank that reduced it.
//!
//! One copy in, one copy out, and each element reduced by exactly one rank in
//! one order, so every rank ends bit-identical. Chunks of at most
//! [`SMALL_MAX`] bytes skip step 2: each rank reduces the whole chunk from
//! all slots itself, in rank order (the same code on the same inputs in the
//! same order gives the same bits), which saves a phase for latency.
//!
//! [`shards`] splits an allreduce into its reduce-scatter and allgather
//! halves, for the hierarchical allreduce.
//!
//! Consecutive chunks alternate between the two slots. Invariant: a rank
//! writes a slot again only two chunks later, after it has seen every rank
//! signal the first phase of the chunk in between, which each rank does only
//! after it finished reading the earlier chunk; so no slot is overwritten
//! while read. Headers are double-buffered by collective number for the same
//! reason.
//!
//! Waiting spins briefly (only when there are at least as many cores as
//! ranks, and less while spinning does not pay: [`crate::spin`]), then
//! yields the CPU, then sleeps on a futex, waking every [`POLL`] to check
//! that every peer's TCP connection is still open (a dead process's sockets
//! are closed by the kernel), whether a peer gave up (the segment's abort
//! word) and the I/O deadline. So a dead or failed peer is `PeerLost` naming
//! it within [`POLL`], and a silent one is `Timeout` naming it.

mod futex;
mod segment;
mod setup;
mod shards;

use std::ops::Range;
use std::sync::atomic::Ordering::SeqCst;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::link::Link;
use crate::partition::segment as part;
use crate::reduce::{Element, ReduceOp};
use crate::spin::{self, SpinBudget};
use crate::wire::{Header, HEADER_LEN};
use segment::Segment;

pub(crate) use setup::negotiate;

/// Bytes per data slot: the largest chunk.
const SLOT_BYTES: usize = 1 << 20;
/// Chunks up to this many bytes are reduced by every rank (one phase).
const SMALL_MAX: usize = 16 << 10;
/// How long a waiter yields the CPU before it sleeps on the futex.
const YIELD_FOR: Duration = Duration::from_millis(2);
/// Longest futex sleep between checks of the peers and the deadline.
const POLL: Duration = Duration::from_millis(10);

/// This rank's end of the shared memory transport.
#[derive(Debug)]
pub(crate) struct ShmTransport {
    segment: Segment,
    rank: usize,
    size: usize,
    /// Phases this rank has completed: the value of its progress counter.
    phase: u32,
    /// Chunks this rank has copied in; the parity picks the slot.
    chunks: u64,
    io_timeout: Duration,
    /// How long waits busy-poll before they yield; `None` when they may
    /// not (more ranks than cores).
    spin: Option<SpinBudget>,
}

impl ShmTransport {
    /// Never busy-polls: for the ranks of one host in a hierarchical job,
    /// whose waits include other hosts' network round trips.
    pub(crate) fn without_spinning(mut self) -> ShmTransport {
        self.spin = None;
        self
    }
}

impl ShmTransport {
    fn new(segment: Segment, rank: usize, size: usize, io_timeout: Duration) -> ShmTransport {
        ShmTransport {
            segment,
            rank,
            size,
            phase: 0,
            chunks: 0,
            io_timeout,
            spin: spin::a_core_each(size).then(SpinBudget::new),
        }
    }

    /// Allreduce of `data` with `op` among all ranks, opened by `header`.
    /// `links` are the communicator's connections, watched while waiting.
    pub(crate) fn allreduce<T: Element>(
        &mut self,
        links: &[Option<Link>],
        data: &mut [T],
        op: ReduceOp,
        header: &Header,
    ) -> Result<()> {
        const DURING: &str = "allreduce";
        let (n, me) = (self.size, self.rank);
        let chunk_elems = self.segment.slot_bytes() / std::mem::size_of::<T>();
        let small = std::mem::size_of_val(data) <= SMALL_MAX;
        self.publish(header);
        let total = data.len();
        let chunks = total.div_ceil(chunk_elems).max(1);
        for c in 0..chunks {
            let start = c * chunk_elems;
            let chunk = &mut data[start..(start + chunk_elems).min(total)];
            let len = chunk.len();
            let which = self.next_slot();
            // SAFETY (all slot accesses below): the regions are inside the
            // slots (len <= chunk_elems), and by the phase protocol (module
            // docs) no other rank writes a region while it is borrowed here.
            unsafe { self.region_mut::<T>(me, which, 0..len) }.copy_from_slice(chunk);
            self.complete_phase(links, header, DURING, c == 0)?;
            if small {
                chunk.copy_from_slice(unsafe { self.region::<T>(0, which, 0..len) });
                for k in 1..n {
                    T::reduce(chunk, unsafe { self.region::<T>(k, which, 0..len) }, op);
                }
                if op == ReduceOp::Average {
                    T::divide(chunk, n);
                }
                continue;
            }
            let mine = part(len, n, me);
            let acc = unsafe { self.region_mut::<T>(me, which, mine.clone()) };
            for step in 1..n {
                let k = (me + step) % n;
                T::reduce(acc, unsafe { self.region::<T>(k, which, mine.clone()) }, op);
            }
            if op == ReduceOp::Average {
                T::divide(acc, n);
            }
            self.complete_phase(links, header, DURING, false)?;
            for k in 0..n {
                let theirs = part(len, n, k);
                chunk[theirs.clone()]
                    .copy_from_slice(unsafe { self.region::<T>(k, which, theirs) });
            }
        }
        Ok(())
    }

    /// Returns once every rank has entered the barrier opened by `header`.
    pub(crate) fn barrier(&mut self, links: &[Option<Link>], header: &Header) -> Result<()> {
        self.publish(header);
        self.complete_phase(links, header, "barrier", true)
    }

    /// Tells the peers this rank gave up (they fail with `PeerLost` naming
    /// it) and wakes any that sleep. The first rank to give up is kept.
    pub(crate) fn abort(&self) {
        let _ = self
            .segment
            .abort_word()
            .compare_exchange(0, self.rank as u32 + 1, SeqCst, SeqCst);
        for k in 0..self.size {
            futex::wake_all(&self.segment.control(k).progress);
        }
    }

    /// Rank `rank`'s slot `which`, elements `range`, as `T`s.
    ///
    /// # Safety
    /// `range` must lie within the slot, and no process may write these
    /// bytes while the returned slice lives.
    unsafe fn region<T: Element>(&self, rank: usize, which: usize, range: Range<usize>) -> &[T] {
        let base = self.segment.slot(rank, which).cast::<T>();
        // SAFETY: slots are page aligned and a multiple of any element size
        // apart, the caller keeps the range inside the slot and unwritten,
        // and any bytes are a valid `T` (`Element` is sealed to primitives).
        unsafe { std::slice::from_raw_parts(base.add(range.start), range.len()) }
    }

    /// As [`ShmTransport::region`], writable.
    ///
    /// # Safety
    /// As for `region`, and no other reference to these bytes may exist
    /// while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn region_mut<T: Element>(
        &self,
        rank: usize,
        which: usize,
        range: Range<usize>,
    ) -> &mut [T] {
        let base = self.segment.slot(rank, which).cast::<T>();
        // SAFETY: as in `region`; the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(base.add(range.start), range.len()) }
    }

    /// The slot for the next chunk: the two alternate.
    fn next_slot(&mut self) -> usize {
        let which = (self.chunks % 2) as usize;
        self.chunks += 1;
        which
    }

    /// Stores this rank's header of the collective `header.seq`.
    fn publish(&self, header: &Header) {
        let words = header_words(header);
        let slot = &self.segment.control(self.rank).header[(header.seq % 2) as usize];
        for (word, value) in slot.iter().zip(words) {
            word.store(value, SeqCst);
        }
    }

    /// Requires every rank's published header to equal ours.
    fn check_headers(&self, ours: &Header) -> Result<()> {
        for k in (0..self.size).filter(|&k| k != self.rank) {
            let slot = &self.segment.control(k).header[(ours.seq % 2) as usize];
            let mut bytes = [0u8; HEADER_LEN];
            for (i, word) in slot.iter().enumerate() {
                bytes[i * 8..i * 8 + 8].copy_from_slice(&word.load(SeqCst).to_le_bytes());
            }
            let theirs = Header::decode(&bytes);
            if theirs != *ours {
                return Err(mismatch(k, &theirs, ours));
            }
        }
        Ok(())
    }

    /// Completes this rank's part of a phase and waits for every rank's; on
    /// the `first` phase of a collective, requires every rank to have opened
    /// the same one.
    fn complete_phase(
        &mut self,
        links: &[Option<Link>],
        header: &Header,
        during: &str,
        first: bool,
    ) -> Result<()> {
        self.signal();
        self.wait_all(links, header, during)?;
        if first {
            self.check_headers(header)?;
        }
        Ok(())
    }

    /// Completes this rank's current phase.
    fn signal(&mut self) {
        self.phase = self.phase.wrapping_add(1);
        let control = self.segment.control(self.rank);
        control.progress.store(self.phase, SeqCst);
        if control.waiters.load(SeqCst) > 0 {
            futex::wake_all(&control.progress);
        }
    }

    /// Waits until every rank has completed this rank's current phase.
    fn wait_all(&self, links: &[Option<Link>], ours: &Header, during: &str) -> Result<()> {
        for k in (0..self.size).filter(|&k| k != self.rank) {
            self.wait_for(links, k, ours, during)?;
        }
        Ok(())
    }

    fn wait_for(
        &self,
        links: &[Option<Link>],
        k: usize,
        ours: &Header,
        during: &str,
    ) -> Result<()> {
        let control = self.segment.control(k);
        let target = self.phase;
        let reached = |seen: u32| seen.wrapping_sub(target) as i32 >= 0;
        if reached(control.progress.load(SeqCst)) {
            return Ok(());
        }
        let spinning = |budget: &SpinBudget| budget.spin(|| reached(control.progress.load(SeqCst)));
        if self.spin.as_ref().is_some_and(spinning) {
            return Ok(());
        }
        let started = Instant::now();
        while started.elapsed() < YIELD_FOR {
            for _ in 0..32 {
                if reached(control.progress.load(SeqCst)) {
                    return Ok(());
                }
                thread::yield_now();
            }
        }
        let deadline = started + self.io_timeout;
        loop {
            if reached(control.progress.load(SeqCst)) {
                return Ok(());
            }
            if let Err(error) = self.check_peers(links, ours, during) {
                // A peer may legitimately move on once rank k has signalled.
                if reached(control.progress.load(SeqCst)) {
                    return Ok(());
                }
                return Err(error);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "after {:?} waiting for rank {k} during {during}",
                        self.io_timeout
                    ),
                    rank: Some(k),
                });
            }
            control.waiters.fetch_add(1, SeqCst);
            let seen = control.progress.load(SeqCst);
            if !reached(seen) {
                futex::wait(&control.progress, seen, POLL.min(deadline - now));
            }
            control.waiters.fetch_sub(1, SeqCst);
        }
    }

    /// Fails if a peer's connection is closed, a peer gave up, or a peer
    /// sent a TCP collective's header (it called another collective).
    fn check_peers(&self, links: &[Option<Link>], ours: &Header, during: &str) -> Result<()> {
        let mut pending = None;
        for link in links.iter().flatten() {
            let mut bytes = [0u8; HEADER_LEN];
            if link.peek(&mut bytes, during)? == HEADER_LEN {
                pending = Some((link.rank(), Header::decode(&bytes)));
            }
        }
        let aborted = self.segment.abort_word().load(SeqCst);
        if aborted != 0 && aborted as usize - 1 != self.rank {
            return Err(Error::PeerLost {
                rank: aborted as usize - 1,
                context: format!("during {during}: the peer gave up after an error"),
            });
        }
        match pending {
            Some((rank, theirs)) => Err(mismatch(rank, &theirs, ours)),
            None => Ok(()),
        }
    }
}

fn header_words(header: &Header) -> [u64; 3] {
    let bytes = header.encode();
    let mut words = [0u64; 3];
    for (i, word) in words.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        *word = u64::from_le_bytes(b);
    }
    words
}

fn mismatch(rank: usize, theirs: &Header, ours: &Header) -> Error {
    Error::Mismatch {
        rank,
        detail: format!(
            "it called {} while this rank called {}",
            theirs.describe(),
            ours.describe()
        ),
    }
}
