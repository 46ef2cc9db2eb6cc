//! The NCCL backend of a build with the `cuda` feature: setup over the TCP
//! mesh, enqueueing on the caller's stream, and safe wrappers for cudarc's
//! device slices.
//!
//! Invariant: the NCCL communicator is freed before the library that made
//! it is unloaded ([`Inner`]'s `Drop` runs before its fields drop), and it
//! is aborted rather than destroyed once any call on it failed or NCCL
//! reports an asynchronous error, since a destroy waits for peers that may
//! be gone.

use std::ffi::{c_int, c_void};
use std::path::Path;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use log::{debug, warn};

use super::device::{self, guarded};
use super::library::{NcclLibrary, RawComm, UniqueId, UNIQUE_ID_BYTES};
use super::{Call, DevicePtr, NcclCommunicator, StreamHandle};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::reduce::{Element, ReduceOp};

/// One rank's live NCCL communicator.
pub(super) struct Inner {
    comm: RawComm,
    rank: usize,
    size: usize,
    /// Keeps the device's primary context retained while the communicator
    /// lives, and is made current before every NCCL call.
    context: Arc<CudaContext>,
    library: NcclLibrary,
    /// Message of the failure that made this communicator unusable.
    failure: Option<String>,
}

// SAFETY: an NCCL communicator may be used from any thread, one at a time;
// every use goes through `&mut self`, and the context is made current on
// the calling thread first.
unsafe impl Send for Inner {}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclCommunicator")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("device", &self.context.ordinal())
            .field("library", &self.library)
            .field("failure", &self.failure)
            .finish()
    }
}

/// What a rank brings to the setup once its device is open and NCCL loaded.
struct Local {
    context: Arc<CudaContext>,
    library: NcclLibrary,
    /// Rank 0's unique id.
    id: Option<UniqueId>,
}

impl Inner {
    pub(super) fn new(
        comm: &mut Communicator,
        device_ordinal: usize,
        library: Option<&Path>,
    ) -> Result<Inner> {
        let (rank, size) = (comm.rank(), comm.size());
        let local = prepare(rank, device_ordinal, library);
        let failure = first_failure(comm, local.as_ref().err().map_or("", String::as_str))?;
        let local = local.map_err(|reason| Error::NcclUnavailable { reason })?;
        if let Some(failure) = failure {
            return Err(Error::NcclUnavailable { reason: failure });
        }
        let mut id_bytes = [0u8; UNIQUE_ID_BYTES];
        if let Some(id) = &local.id {
            for (byte, c) in id_bytes.iter_mut().zip(id.internal) {
                *byte = c as u8;
            }
        }
        comm.broadcast(&mut id_bytes, 0)?;
        let mut id = UniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        for (c, byte) in id.internal.iter_mut().zip(id_bytes) {
            *c = byte as _;
        }
        let during = format!("setup of rank {rank} of {size} on CUDA device {device_ordinal}");
        let (n, r) = (to_int(size, &during)?, to_int(rank, &during)?);
        bind(&local.context, &during)?;
        // SAFETY: the device's context was made current just above.
        let raw = unsafe { local.library.init_rank(n, id, r) }
            .map_err(|detail| Error::Nccl { during, detail })?;
        debug!(
            "rank {rank}: NCCL {} ({}) communicator of {size} ranks on CUDA device {device_ordinal}",
            local.library.version_string(),
            local.library.name()
        );
        Ok(Inner {
            comm: raw,
            rank,
            size,
            context: local.context,
            library: local.library,
            failure: None,
        })
    }

    pub(super) fn rank(&self) -> usize {
        self.rank
    }

    pub(super) fn size(&self) -> usize {
        self.size
    }

    pub(super) fn device_ordinal(&self) -> usize {
        self.context.ordinal()
    }

    pub(super) fn nccl_version(&self) -> String {
        self.library.version_string()
    }

    /// Validates `call`, makes the device current, reports an earlier
    /// asynchronous failure, and enqueues `call` on `stream`; any error
    /// makes the communicator unusable.
    ///
    /// # Safety
    /// The pointers and stream of `call` satisfy the contract of the
    /// [`NcclCommunicator`] method that built it.
    pub(super) unsafe fn enqueue(&mut self, call: &Call, stream: StreamHandle) -> Result<()> {
        if let Some(cause) = &self.failure {
            return Err(Error::Unusable {
                cause: cause.clone(),
            });
        }
        let result = self.try_enqueue(call, stream);
        if let Err(error) = &result {
            self.failure = Some(error.to_string());
        }
        result
    }

    /// # Safety
    /// As [`Inner::enqueue`].
    unsafe fn try_enqueue(&self, call: &Call, stream: StreamHandle) -> Result<()> {
        call.validate(self.rank, self.size)?;
        let during = call.describe();
        bind(&self.context, &during)?;
        let lib = &self.library;
        let nccl = |detail| Error::Nccl {
            during: during.clone(),
            detail,
        };
        lib.async_error(self.comm).map_err(nccl)?;
        let stream = stream.0 as usize as *mut c_void;
        let result = match *call {
            Call::AllReduce {
                send,
                recv,
                count,
                dtype,
                op,
            } => lib.all_reduce(
                input(send),
                output(recv),
                count,
                dtype,
                op,
                self.comm,
                stream,
            ),
            Call::Broadcast {
                send,
                recv,
                count,
                dtype,
                root,
            } => lib.broadcast(
                input(send),
                output(recv),
                count,
                dtype,
                to_int(root, &during)?,
                self.comm,
                stream,
            ),
            Call::AllGather {
                send,
                recv,
                send_count,
                dtype,
            } => lib.all_gather(
                input(send),
                output(recv),
                send_count,
                dtype,
                self.comm,
                stream,
            ),
            Call::ReduceScatter {
                send,
                recv,
                recv_count,
                dtype,
                op,
            } => lib.reduce_scatter(
                input(send),
                output(recv),
                recv_count,
                dtype,
                op,
                self.comm,
                stream,
            ),
        };
        result.map_err(nccl)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(e) = bind(&self.context, "freeing the NCCL communicator") {
            warn!("rank {}: {e}", self.rank);
        }
        // SAFETY: `comm` is live until `finish` below.
        let abort =
            self.failure.is_some() || unsafe { self.library.async_error(self.comm) }.is_err();
        // SAFETY: `comm` came from this library's init_rank and is not used
        // again; the library is unloaded only after this (field drop).
        if let Err(e) = unsafe { self.library.finish(self.comm, abort) } {
            warn!("rank {}: freeing the NCCL communicator: {e}", self.rank);
        }
    }
}

/// Opens the device, loads NCCL and, on rank 0, creates the unique id.
fn prepare(rank: usize, device_ordinal: usize, library: Option<&Path>) -> Result<Local, String> {
    let context = device::open(device_ordinal)?;
    let library = NcclLibrary::load(library).map_err(|e| format!("{e}; {}", device::NEEDS))?;
    let id = if rank == 0 {
        Some(
            library
                .unique_id()
                .map_err(|e| format!("ncclGetUniqueId failed: {e}"))?,
        )
    } else {
        None
    };
    Ok(Local {
        context,
        library,
        id,
    })
}

/// Tells every rank whether every rank could prepare NCCL: each
/// contributes its failure message (`mine`, empty on success) to an
/// allgather. Returns the reason to report when another rank failed: the
/// first such rank and its message.
fn first_failure(comm: &mut Communicator, mine: &str) -> Result<Option<String>> {
    let (bytes, counts) = comm.allgather(mine.as_bytes())?;
    let mut start = 0;
    let mut failed = Vec::new();
    for (rank, count) in counts.into_iter().enumerate() {
        if count > 0 {
            failed.push((rank, String::from_utf8_lossy(&bytes[start..start + count])));
        }
        start += count;
    }
    Ok(failed.first().map(|(rank, reason)| {
        format!(
            "rank {rank} could not set up NCCL ({} of {} ranks failed): {reason}",
            failed.len(),
            comm.size()
        )
    }))
}

/// Makes `context` current on this thread.
fn bind(context: &CudaContext, during: &str) -> Result<()> {
    guarded("binding the device", || context.bind_to_thread()).map_err(|detail| Error::Nccl {
        during: during.to_owned(),
        detail,
    })
}

fn to_int(value: usize, during: &str) -> Result<c_int> {
    c_int::try_from(value)
        .map_err(|_| Error::InvalidArgument(format!("{during}: {value} does not fit NCCL's int")))
}

fn input(ptr: DevicePtr) -> *const c_void {
    ptr.0 as usize as *const c_void
}

fn output(ptr: DevicePtr) -> *mut c_void {
    ptr.0 as usize as *mut c_void
}

/// Safe collectives on cudarc device memory. The slices' pending work is
/// ordered before the collective and later work after it through cudarc's
/// event tracking; results are ready once `stream` reaches them.
impl NcclCommunicator {
    /// Reduces `data` in place across ranks with `op`, on `stream`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `stream` or `data` is not on this
    /// communicator's device; otherwise as [`NcclCommunicator::allreduce`].
    pub fn allreduce_in_place<T: Element>(
        &mut self,
        data: &mut impl cudarc::driver::DevicePtrMut<T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_device(stream, data.stream())?;
        let count = data.len();
        let (ptr, _record) = data.device_ptr_mut(stream);
        // SAFETY: `ptr` is `count` elements of T on this device, kept alive
        // and exclusively borrowed until the work is enqueued; the record
        // guard orders later uses after it.
        unsafe {
            self.allreduce(
                DevicePtr(ptr),
                DevicePtr(ptr),
                count,
                T::DTYPE,
                op,
                raw(stream),
            )
        }
    }

    /// Replaces `data` on every rank with rank `root`'s, on `stream`.
    ///
    /// # Errors
    /// As [`NcclCommunicator::allreduce_in_place`] and
    /// [`NcclCommunicator::broadcast`].
    pub fn broadcast_in_place<T: Element>(
        &mut self,
        data: &mut impl cudarc::driver::DevicePtrMut<T>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_device(stream, data.stream())?;
        let count = data.len();
        let (ptr, _record) = data.device_ptr_mut(stream);
        // SAFETY: as in allreduce_in_place.
        unsafe {
            self.broadcast(
                DevicePtr(ptr),
                DevicePtr(ptr),
                count,
                T::DTYPE,
                root,
                raw(stream),
            )
        }
    }

    /// Gathers every rank's `send` into `recv` (`size` times as long) in
    /// rank order, on `stream`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `recv` is not `size * send.len()`
    /// long; otherwise as [`NcclCommunicator::allreduce_in_place`].
    pub fn allgather_into<T: Element>(
        &mut self,
        send: &impl cudarc::driver::DevicePtr<T>,
        recv: &mut impl cudarc::driver::DevicePtrMut<T>,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_device(stream, send.stream())?;
        self.check_device(stream, recv.stream())?;
        let count = send.len();
        self.check_len("allgather", recv.len(), count)?;
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        // SAFETY: both buffers are on this device with the lengths checked
        // above, borrowed until the work is enqueued.
        unsafe {
            self.allgather(
                DevicePtr(send_ptr),
                DevicePtr(recv_ptr),
                count,
                T::DTYPE,
                raw(stream),
            )
        }
    }

    /// Reduces every rank's `send` (`size` blocks of `recv.len()`) with
    /// `op` and leaves block `rank` of the result in `recv`, on `stream`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `send` is not `size * recv.len()`
    /// long; otherwise as [`NcclCommunicator::allreduce_in_place`].
    pub fn reducescatter_into<T: Element>(
        &mut self,
        send: &impl cudarc::driver::DevicePtr<T>,
        recv: &mut impl cudarc::driver::DevicePtrMut<T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_device(stream, send.stream())?;
        self.check_device(stream, recv.stream())?;
        let count = recv.len();
        self.check_len("reducescatter", send.len(), count)?;
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        // SAFETY: as in allgather_into.
        unsafe {
            self.reducescatter(
                DevicePtr(send_ptr),
                DevicePtr(recv_ptr),
                count,
                T::DTYPE,
                op,
                raw(stream),
            )
        }
    }

    /// Fails unless `stream` and the buffer's own stream are on this
    /// communicator's device.
    fn check_device(&self, stream: &CudaStream, buffer: &Arc<CudaStream>) -> Result<()> {
        let device = self.device_ordinal();
        for (what, ordinal) in [
            ("stream", stream.context().ordinal()),
            ("buffer", buffer.context().ordinal()),
        ] {
            if ordinal != device {
                return Err(Error::InvalidArgument(format!(
                    "the {what} is on CUDA device {ordinal}, the NCCL communicator on {device}"
                )));
            }
        }
        Ok(())
    }

    /// Fails unless the longer buffer holds `size` blocks of `block`.
    fn check_len(&self, what: &str, long: usize, block: usize) -> Result<()> {
        match block.checked_mul(self.size()) {
            Some(expected) if expected == long => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "{what} of {block} elements per rank over {} ranks needs a buffer of \
                 {block} x {} elements, got {long}",
                self.size(),
                self.size()
            ))),
        }
    }
}

fn raw(stream: &CudaStream) -> StreamHandle {
    StreamHandle(stream.cu_stream() as usize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::tests::pair;
    use std::thread;

    #[test]
    fn a_rank_without_nccl_is_named_to_every_rank() {
        let (mut c0, mut c1) = pair();
        let other = thread::spawn(move || {
            let result = first_failure(&mut c1, "libcuda.so could not be loaded");
            (result, c1)
        });
        let reason = first_failure(&mut c0, "").unwrap();
        let expected = "rank 1 could not set up NCCL (1 of 2 ranks failed): \
                        libcuda.so could not be loaded";
        assert_eq!(reason.as_deref(), Some(expected));
        let (theirs, _c1) = other.join().unwrap();
        assert_eq!(theirs.unwrap().as_deref(), Some(expected));
    }

    #[test]
    fn every_rank_ready_agrees() {
        let (mut c0, mut c1) = pair();
        let other = thread::spawn(move || first_failure(&mut c1, ""));
        assert_eq!(first_failure(&mut c0, "").unwrap(), None);
        assert_eq!(other.join().unwrap().unwrap(), None);
    }

    /// Without a driver the device probe fails with the message users see,
    /// not cudarc's panic.
    #[test]
    fn nccl_device_probe_without_a_driver_names_the_driver() {
        // SAFETY: only probes for the library.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            return; // a GPU host: the probe may succeed
        }
        let err = device::open(0).unwrap_err();
        assert_eq!(
            err,
            "libcuda.so could not be loaded (no NVIDIA driver on this host); GPU collectives \
             need an NVIDIA driver, a CUDA device and NCCL (pip install nvidia-nccl-cu12)"
        );
    }
}
