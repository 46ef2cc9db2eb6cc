//! The shared memory segment of the ranks on one host: creating it, mapping
//! it, and where each rank's control words and data slots live in it.
//!
//! Local rank 0 creates a POSIX shared memory object with a random name
//! ([`Segment::create`]), reserves its pages (`posix_fallocate`, so a full
//! `/dev/shm` fails here with an error instead of a `SIGBUS` later) and maps
//! it; the other ranks open the name and map it too ([`Segment::open`]). Once
//! every rank has mapped it, rank 0 unlinks the name ([`unlink`]): the memory
//! then lives exactly as long as some rank keeps its mapping, so nothing is
//! left behind in `/dev/shm` however the processes end.
//!
//! Layout, for `size` ranks and slots of `slot_bytes`:
//!
//! ```text
//! [ line 0: abort word ][ line 1 + r: rank r's control words ]...  (page aligned)
//! [ rank 0 slot 0 ][ rank 0 slot 1 ][ rank 1 slot 0 ] ...          (page aligned)
//! ```
//!
//! Each rank's control words sit on their own 128-byte line (two cache lines,
//! against adjacent-line prefetching) so that ranks polling one rank's
//! progress do not slow the others down.
//!
//! Invariant: a freshly created segment is all zeros, which is the initial
//! state of every control word; and only the rank that owns a slot writes to
//! it, except where the collective's protocol hands a region to one reader.

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rand::Rng;

/// Bytes per control line.
const LINE: usize = 128;
const PAGE: usize = 4096;
/// Prefix of the shared memory objects' names (`/dev/shm/horovod-rs-…`).
pub(crate) const NAME_PREFIX: &str = "horovod-rs-";

/// The control words of one rank, on a line of its own.
#[repr(C)]
pub(crate) struct Control {
    /// Number of phases this rank has completed (wrapping).
    pub progress: AtomicU32,
    /// Number of ranks asleep in a futex wait on `progress`.
    pub waiters: AtomicU32,
    /// The encoded collective header of this rank's current collective,
    /// double-buffered by collective sequence number.
    pub header: [[AtomicU64; 3]; 2],
}

const _: () = assert!(std::mem::size_of::<Control>() <= LINE);

/// A mapping of the segment.
#[derive(Debug)]
pub(crate) struct Segment {
    base: NonNull<u8>,
    len: usize,
    size: usize,
    slot_bytes: usize,
    data_offset: usize,
}

// SAFETY: the mapping is plain shared memory; all shared access to it goes
// through atomics or through regions the protocol gives to one thread.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

fn round_up(value: usize, to: usize) -> usize {
    value.div_ceil(to) * to
}

fn os_error(what: &str) -> io::Error {
    let err = io::Error::last_os_error();
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

impl Segment {
    fn layout(size: usize, slot_bytes: usize) -> (usize, usize) {
        let data_offset = round_up(LINE * (1 + size), PAGE);
        (data_offset, data_offset + size * 2 * slot_bytes)
    }

    /// Creates and maps a new segment for `size` ranks under a fresh random
    /// name, returned with it. The caller must [`unlink`] the name.
    pub(crate) fn create(size: usize, slot_bytes: usize) -> io::Result<(Segment, String)> {
        let (data_offset, len) = Segment::layout(size, slot_bytes);
        let name = format!("/{NAME_PREFIX}{:032x}", rand::thread_rng().gen::<u128>());
        let c_name = CString::new(name.clone()).map_err(io::Error::other)?;
        // SAFETY: `c_name` is a valid NUL-terminated string.
        let fd = unsafe {
            libc::shm_open(
                c_name.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
        };
        if fd < 0 {
            return Err(os_error("creating the shared memory object"));
        }
        let len_off = libc::off_t::try_from(len).map_err(io::Error::other);
        let result = len_off.and_then(|len_off| {
            // SAFETY: `fd` is the descriptor just opened.
            let rc = unsafe { libc::posix_fallocate(fd, 0, len_off) };
            if rc != 0 {
                return Err(io::Error::new(
                    io::Error::from_raw_os_error(rc).kind(),
                    format!(
                        "reserving {len} bytes of shared memory: {}",
                        io::Error::from_raw_os_error(rc)
                    ),
                ));
            }
            // SAFETY: `fd` refers to an object of `len` bytes.
            unsafe { Segment::map(fd, size, slot_bytes, data_offset, len) }
        });
        // SAFETY: `fd` is ours; the mapping, if any, stays valid without it.
        unsafe { libc::close(fd) };
        match result {
            Ok(segment) => Ok((segment, name)),
            Err(e) => {
                unlink(&name);
                Err(e)
            }
        }
    }

    /// Opens and maps the segment `name` created by a peer for `size` ranks.
    pub(crate) fn open(name: &str, size: usize, slot_bytes: usize) -> io::Result<Segment> {
        let (data_offset, len) = Segment::layout(size, slot_bytes);
        if !name.starts_with('/') || !name[1..].starts_with(NAME_PREFIX) || name[1..].contains('/')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a segment name: {name:?}"),
            ));
        }
        let c_name = CString::new(name).map_err(io::Error::other)?;
        // SAFETY: `c_name` is a valid NUL-terminated string.
        let fd = unsafe { libc::shm_open(c_name.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(os_error("opening the shared memory object"));
        }
        let result = {
            // SAFETY: `stat` is plain data filled in by `fstat`.
            let mut stat: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `fd` is open and `stat` is writable.
            if unsafe { libc::fstat(fd, &mut stat) } != 0 {
                Err(os_error("reading the shared memory object's size"))
            } else if usize::try_from(stat.st_size).ok() != Some(len) {
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("segment has {} bytes, expected {len}", stat.st_size),
                ))
            } else {
                // SAFETY: `fd` refers to an object of `len` bytes.
                unsafe { Segment::map(fd, size, slot_bytes, data_offset, len) }
            }
        };
        // SAFETY: `fd` is ours; the mapping, if any, stays valid without it.
        unsafe { libc::close(fd) };
        result
    }

    /// # Safety
    /// `fd` must be an open shared memory object of at least `len` bytes.
    unsafe fn map(
        fd: libc::c_int,
        size: usize,
        slot_bytes: usize,
        data_offset: usize,
        len: usize,
    ) -> io::Result<Segment> {
        // SAFETY: a fresh shared mapping of `len` bytes of `fd`, which the
        // caller guarantees is large enough.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os_error("mapping the shared memory object"));
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Segment {
            base,
            len,
            size,
            slot_bytes,
            data_offset,
        })
    }

    /// Bytes per data slot.
    pub(crate) fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The word a failing rank stores its rank plus one into.
    pub(crate) fn abort_word(&self) -> &AtomicU32 {
        // SAFETY: line 0 is inside the mapping, page aligned, zero-initialised
        // and only ever accessed atomically.
        unsafe { &*self.base.as_ptr().cast::<AtomicU32>() }
    }

    /// Rank `rank`'s control words.
    pub(crate) fn control(&self, rank: usize) -> &Control {
        assert!(rank < self.size);
        // SAFETY: line 1 + rank lies before `data_offset`, is 128-byte aligned
        // and zero-initialised (a valid `Control`), and is only ever accessed
        // through its atomics.
        unsafe { &*self.base.as_ptr().add(LINE * (1 + rank)).cast::<Control>() }
    }

    /// Start of rank `rank`'s slot `which` (0 or 1).
    pub(crate) fn slot(&self, rank: usize, which: usize) -> *mut u8 {
        assert!(rank < self.size && which < 2);
        let offset = self.data_offset + (rank * 2 + which) * self.slot_bytes;
        debug_assert!(offset + self.slot_bytes <= self.len);
        // SAFETY: the offset is inside the mapping (checked layout).
        unsafe { self.base.as_ptr().add(offset) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Removes the name of a segment; the memory stays while mapped. Errors (the
/// name is already gone) are ignored.
pub(crate) fn unlink(name: &str) {
    if let Ok(c_name) = CString::new(name) {
        // SAFETY: `c_name` is a valid NUL-terminated string.
        unsafe { libc::shm_unlink(c_name.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_segment_is_shared_zeroed_and_unlinkable() {
        let (a, name) = Segment::create(3, 8192).unwrap();
        let b = Segment::open(&name, 3, 8192).unwrap();
        unlink(&name);
        assert!(Segment::open(&name, 3, 8192).is_err(), "name still exists");
        assert_eq!(
            b.control(2)
                .progress
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
        a.control(2)
            .progress
            .store(7, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            b.control(2)
                .progress
                .load(std::sync::atomic::Ordering::SeqCst),
            7
        );
        // SAFETY: slots of 8192 bytes; nothing else uses them here.
        unsafe {
            *a.slot(1, 1).add(8191) = 5;
            assert_eq!(*b.slot(1, 1).add(8191), 5);
        }
    }

    #[test]
    fn wrong_names_and_sizes_are_refused() {
        assert!(Segment::open("/etc/passwd", 2, 4096).is_err());
        assert!(Segment::open("/horovod-rs-../x", 2, 4096).is_err());
        let (_a, name) = Segment::create(2, 4096).unwrap();
        assert!(Segment::open(&name, 3, 4096).is_err(), "size mismatch");
        unlink(&name);
    }
}
