//! Collectives through shared memory, for communicators whose ranks all run
//! on one host: the way MPI beats TCP on one machine.
//!
//! The ranks map one [`segment::Segment`] (set up at connect by
//! [`setup::negotiate`]). Each rank owns two data slots in it and a progress
//! counter. A collective is a sequence of *phases*: a rank does its part of a
//! phase, then increments its counter ("signals") and waits until every
//! rank's counter has reached the same value.
//!
//! Allreduce works chunk by chunk (a chunk fills a slot); part `k` of a
//! chunk (a [`segment`] of it) is reduced by rank `k`:
//! 1. every rank copies the parts the others reduce into its slot, each at
//!    its place in the chunk, and signals;
//! 2. rank `r` reduces part `r` in its own data, reading that part of every
//!    other rank's slot, copies the result into its slot, and signals;
//! 3. every rank copies each other part from the slot of the rank that
//!    reduced it.
//!
//! Per rank and chunk of `B` bytes with two ranks, that is `B` read from
//! its data and `B` written to it, `B` written to and `B` read from shared
//! memory: the least any way through a shared segment moves, since a rank
//! cannot see its peer's memory. Each element is reduced by exactly one rank
//! in one order, so every rank ends bit-identical. Chunks of at most
//! [`SMALL_MAX`] bytes skip step 2: each rank copies the whole chunk into its
//! slot, then reduces all slots itself, in rank order (the same code on the
//! same inputs in the same order gives the same bits), which saves a phase
//! for latency.
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
//! yields the CPU (unless that lately gave the core away for a time slice),
//! then sleeps on a futex, waking every [`POLL`] to check
//! that every peer's TCP connection is still open (a dead process's sockets
//! are closed by the kernel), whether a peer gave up (the segment's abort
//! word) and the I/O deadline. So a dead or failed peer is `PeerLost` naming
//! it within [`POLL`], and a silent one is `Timeout` naming it.

mod copy;
mod futex;
mod segment;
mod setup;
mod shards;

use std::ops::Range;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::partition::segment as part;
use crate::reduce::{Element, ReduceOp};
use crate::spin::{self, SpinBudget, Yielding};
use crate::wire::{mismatch, Header, HEADER_LEN};
use copy::copy;
use segment::Segment;

pub(crate) use setup::negotiate;

/// Bytes per data slot: the largest chunk.
const SLOT_BYTES: usize = 1 << 20;
/// Chunks up to this many bytes are reduced by every rank (one phase).
const SMALL_MAX: usize = 16 << 10;
/// Bytes reduced at a time before the result is published: a few such
/// blocks (the rank's own, its peers', the copy) fit the L1 cache.
const REDUCE_BLOCK: usize = 4 << 10;
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
    /// Whether waits yield the core before they sleep.
    yielding: Yielding,
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
            yielding: Yielding::default(),
        }
    }

    /// Allreduce of `data` with `op` among all ranks, opened by `header`.
    /// `mesh` holds the communicator's connections, watched while waiting.
    pub(crate) fn allreduce<T: Element>(
        &mut self,
        mesh: &Mesh,
        data: &mut [T],
        op: ReduceOp,
        header: &Header,
    ) -> Result<()> {
        self.publish(header);
        if std::mem::size_of_val(data) <= SMALL_MAX {
            return self.allreduce_small(mesh, data, op, header);
        }
        let chunk_elems = self.segment.slot_bytes() / std::mem::size_of::<T>();
        for (c, chunk) in data.chunks_mut(chunk_elems).enumerate() {
            let which = self.next_slot();
            // SAFETY (the three steps): each runs where its docs say, on a
            // chunk that fits a slot.
            unsafe { self.publish_inputs(chunk, which) };
            self.complete_phase(mesh, header, "allreduce", c == 0)?;
            unsafe { self.reduce_mine(chunk, which, op) };
            self.complete_phase(mesh, header, "allreduce", false)?;
            unsafe { self.gather_results(chunk, which) };
        }
        Ok(())
    }

    /// Allreduce of at most [`SMALL_MAX`] bytes in one phase: every rank
    /// copies its data into its slot, then reduces all slots in rank order
    /// into its data.
    fn allreduce_small<T: Element>(
        &mut self,
        mesh: &Mesh,
        data: &mut [T],
        op: ReduceOp,
        header: &Header,
    ) -> Result<()> {
        let which = self.next_slot();
        let all = 0..data.len();
        // SAFETY (slot accesses below): the data fits a slot; this rank's
        // slot is unread until the phase, every slot unwritten after it
        // until this rank's next phase.
        copy(
            unsafe { self.region_mut::<T>(self.rank, which, all.clone()) },
            data,
        );
        self.complete_phase(mesh, header, "allreduce", true)?;
        let slot = |k: usize| unsafe { self.region::<T>(k, which, all.clone()) };
        // Two ranks at least: one transport per communicator of several.
        T::reduce_from(data, slot(0), slot(1), op);
        for k in 2..self.size {
            T::reduce(data, slot(k), op);
        }
        if op == ReduceOp::Average {
            T::divide(data, self.size);
        }
        Ok(())
    }

    /// Step 1: copies the parts of `chunk` other ranks reduce into this
    /// rank's slot `which`, each at its place in the chunk.
    ///
    /// # Safety
    /// Only before the chunk's first phase (no rank reads `which` then, by
    /// the module's invariant), with `chunk` no longer than a slot.
    unsafe fn publish_inputs<T: Element>(&self, chunk: &[T], which: usize) {
        let (n, me) = (self.size, self.rank);
        for k in (0..n).filter(|&k| k != me) {
            let theirs = part(chunk.len(), n, k);
            // SAFETY: inside the slot; unread until the phase (caller).
            copy(
                unsafe { self.region_mut::<T>(me, which, theirs.clone()) },
                &chunk[theirs],
            );
        }
    }

    /// Step 2: reduces this rank's part of `chunk` in place, from its own
    /// data and the other ranks' copies in the order `me`, `me + 1`, ...,
    /// and copies the result into its slot. Works in blocks that stay in the
    /// L1 cache, so the result is copied out from there.
    ///
    /// # Safety
    /// Only between the chunk's two phases (every rank has copied its part
    /// in, and none reads this rank's part of its slot yet).
    unsafe fn reduce_mine<T: Element>(&self, chunk: &mut [T], which: usize, op: ReduceOp) {
        let (n, me) = (self.size, self.rank);
        let mine = part(chunk.len(), n, me);
        let block = (REDUCE_BLOCK / std::mem::size_of::<T>()).max(1);
        for offset in (0..mine.len()).step_by(block) {
            let len = block.min(mine.len() - offset);
            let acc = &mut chunk[mine.start + offset..][..len];
            let at = mine.start + offset..mine.start + offset + len;
            for step in 1..n {
                let k = (me + step) % n;
                // SAFETY: rank k wrote this before the chunk's first phase
                // and does not write it again in this chunk.
                T::reduce(acc, unsafe { self.region::<T>(k, which, at.clone()) }, op);
            }
            if op == ReduceOp::Average {
                T::divide(acc, n);
            }
            // SAFETY: this rank's own part, unread until the next phase.
            copy(unsafe { self.region_mut::<T>(me, which, at) }, acc);
        }
    }

    /// Step 3: copies every other rank's reduced part of `chunk` from its slot.
    ///
    /// # Safety
    /// Only after the chunk's second phase and before this rank's next one.
    unsafe fn gather_results<T: Element>(&self, chunk: &mut [T], which: usize) {
        let (n, me) = (self.size, self.rank);
        for k in (0..n).filter(|&k| k != me) {
            let theirs = part(chunk.len(), n, k);
            // SAFETY: rank k wrote its part before the second phase and
            // writes this slot again only after this rank's next phase.
            copy(&mut chunk[theirs.clone()], unsafe {
                self.region::<T>(k, which, theirs)
            });
        }
    }

    /// Returns once every rank has entered the barrier opened by `header`.
    pub(crate) fn barrier(&mut self, mesh: &Mesh, header: &Header) -> Result<()> {
        self.publish(header);
        self.complete_phase(mesh, header, "barrier", true)
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
        mesh: &Mesh,
        header: &Header,
        during: &str,
        first: bool,
    ) -> Result<()> {
        self.signal();
        self.wait_all(mesh, header, during)?;
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
    fn wait_all(&self, mesh: &Mesh, ours: &Header, during: &str) -> Result<()> {
        for k in (0..self.size).filter(|&k| k != self.rank) {
            self.wait_for(mesh, k, ours, during)?;
        }
        Ok(())
    }

    fn wait_for(&self, mesh: &Mesh, k: usize, ours: &Header, during: &str) -> Result<()> {
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
        if self
            .yielding
            .yield_until(|| reached(control.progress.load(SeqCst)))
        {
            return Ok(());
        }
        let deadline = started + self.io_timeout;
        loop {
            if reached(control.progress.load(SeqCst)) {
                return Ok(());
            }
            if let Err(error) = self.check_peers(mesh, ours, during) {
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
    fn check_peers(&self, mesh: &Mesh, ours: &Header, during: &str) -> Result<()> {
        let mut pending = None;
        for link in mesh.opened() {
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
