//! A request's bytes: owned by the engine, or lent by the caller.
//!
//! Why lending: a framework's gradient is already a buffer the engine can
//! reduce in place. Copying it into the request and the result back out
//! costs two passes over memory per tensor per step, which is what
//! separates a data-parallel step from one on a single process. A lent
//! payload is the caller's own memory; the engine writes the result there
//! and hands the payload back in the [`super::Output`].
//!
//! A third kind is GPU memory ([`Payload::Device`]): the engine reduces it
//! with NCCL on the caller's CUDA stream. It has no host bytes: viewed as a
//! slice it is empty, and the engine never reads it as one.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::nccl::{DevicePtr, StreamHandle};

/// The elements of a request or a result, native-endian, row-major.
pub enum Payload {
    /// Bytes the engine owns.
    Owned(Vec<u8>),
    /// Memory the caller lends until the payload is dropped.
    Lent(Lent),
    /// GPU memory, reduced with NCCL.
    Device(DeviceBuffer),
}

/// A tensor in GPU memory and the stream its collective is enqueued on.
pub struct DeviceBuffer {
    /// Where the elements start.
    pub ptr: DevicePtr,
    /// Length in bytes.
    pub len: usize,
    /// The CUDA device the memory belongs to.
    pub device: usize,
    /// The caller's stream: the collective is ordered after the work
    /// already enqueued on it (the kernels that produced the tensor).
    pub stream: StreamHandle,
    _keeper: Box<dyn Send>,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceBuffer({} bytes on cuda:{})",
            self.len, self.device
        )
    }
}

/// Memory lent by the caller, kept valid by `keeper` (say, a reference to
/// the tensor that owns it).
pub struct Lent {
    ptr: NonNull<u8>,
    len: usize,
    _keeper: Box<dyn Send>,
}

// SAFETY: `Payload::lent`'s contract gives the payload exclusive access to
// the memory for as long as it lives, so moving it to the engine's thread is
// moving a unique `&mut [u8]` along with what keeps it alive (`Send`).
unsafe impl Send for Lent {}

impl Payload {
    /// Lends `len` bytes at `ptr` to the engine.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` bytes until `keeper` is
    /// dropped (the payload drops it last), and nothing else reads or writes
    /// that memory while the payload lives.
    pub unsafe fn lent(ptr: *mut u8, len: usize, keeper: Box<dyn Send>) -> Payload {
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        Payload::Lent(Lent {
            ptr,
            len,
            _keeper: keeper,
        })
    }

    /// GPU memory for NCCL collectives.
    ///
    /// # Safety
    /// `ptr` points to `len` bytes of memory of CUDA device `device` that
    /// stay allocated until `keeper` is dropped and, after that, until the
    /// work enqueued on `stream` completes; nothing else writes them until
    /// the request's handle completes; `stream` is a live stream of the
    /// device's primary context (or 0).
    pub unsafe fn device(
        ptr: DevicePtr,
        len: usize,
        device: usize,
        stream: StreamHandle,
        keeper: Box<dyn Send>,
    ) -> Payload {
        Payload::Device(DeviceBuffer {
            ptr,
            len,
            device,
            stream,
            _keeper: keeper,
        })
    }

    /// Whether this is the caller's memory.
    pub fn is_lent(&self) -> bool {
        matches!(self, Payload::Lent(_))
    }

    /// The GPU memory, for a device payload.
    pub fn device_buffer(&self) -> Option<&DeviceBuffer> {
        match self {
            Payload::Device(buffer) => Some(buffer),
            _ => None,
        }
    }

    /// Length in bytes, of host or device memory.
    pub fn byte_len(&self) -> usize {
        match self {
            Payload::Device(buffer) => buffer.len,
            host => host.len(),
        }
    }

    /// The bytes as a vector: moved out when owned, copied when lent.
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Owned(bytes) => bytes,
            Payload::Lent(lent) => lent.to_vec(),
            Payload::Device(_) => Vec::new(),
        }
    }
}

impl Deref for Lent {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: valid for `len` bytes and not written elsewhere while the
        // payload lives (`Payload::lent`'s contract).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Lent {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Payload::Owned(bytes) => bytes,
            Payload::Lent(lent) => lent,
            Payload::Device(_) => &[],
        }
    }
}

impl DerefMut for Payload {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Payload::Owned(bytes) => bytes,
            Payload::Lent(lent) => lent,
            Payload::Device(_) => &mut [],
        }
    }
}

impl Default for Payload {
    fn default() -> Payload {
        Payload::Owned(Vec::new())
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        Payload::Owned(bytes)
    }
}

/// A clone owns its bytes: lent memory has one borrower. (A device
/// payload's clone has no bytes: the engine never clones one.)
impl Clone for Payload {
    fn clone(&self) -> Payload {
        Payload::Owned(self.to_vec())
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<u8>> for Payload {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Payload::Owned(bytes) => write!(f, "Payload(owned, {} bytes)", bytes.len()),
            Payload::Lent(lent) => write!(f, "Payload(lent, {} bytes)", lent.len()),
            Payload::Device(buffer) => write!(f, "Payload({buffer:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_payload_writes_into_the_lenders_memory() {
        let mut memory = vec![1u8, 2, 3];
        let ptr = memory.as_mut_ptr();
        // SAFETY: `memory` outlives the payload and is not touched meanwhile.
        let mut payload = unsafe { Payload::lent(ptr, 3, Box::new(())) };
        payload[1] = 9;
        assert!(payload.is_lent());
        assert_eq!(payload.clone(), vec![1, 9, 3]);
        assert!(!payload.clone().is_lent());
        assert_eq!(payload.into_vec(), vec![1, 9, 3]);
        assert_eq!(memory, vec![1, 9, 3]);
    }

    #[test]
    fn the_keeper_lives_as_long_as_the_payload() {
        let kept = std::sync::Arc::new(());
        let mut memory = [0u8; 4];
        // SAFETY: as above.
        let payload = unsafe { Payload::lent(memory.as_mut_ptr(), 4, Box::new(kept.clone())) };
        assert_eq!(std::sync::Arc::strong_count(&kept), 2);
        drop(payload);
        assert_eq!(std::sync::Arc::strong_count(&kept), 1);
    }
}
