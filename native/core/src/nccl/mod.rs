//! NCCL collectives on GPU memory: allreduce, broadcast, allgather and
//! reduce-scatter of device buffers, enqueued on the caller's CUDA stream.
//!
//! Horovod reduces GPU tensors with NCCL on the framework's stream, so the
//! reduction is ordered after the kernels that produced the gradients
//! without a host synchronisation. [`NcclCommunicator`] does the same: the
//! collectives only enqueue work and return; the caller synchronises the
//! stream (or records an event) before it reads the results on the host.
//!
//! Setup rides on the authenticated TCP mesh: every rank opens its device
//! and loads NCCL, the ranks exchange whether that worked (so one rank's
//! missing driver fails every rank, naming it, instead of leaving the
//! others waiting), rank 0 creates NCCL's unique id, the mesh broadcasts
//! it, and every rank joins the NCCL communicator on its device.
//!
//! Nothing links CUDA at build time. With the `cuda` feature the driver is
//! loaded through cudarc and NCCL through `libloading` when a communicator
//! is created (module `library` says why not cudarc's NCCL loader); a host
//! without them gets [`Error::NcclUnavailable`]. Without the feature the
//! same API exists and every constructor returns [`Error::NoCudaSupport`],
//! so callers need no `cfg` of their own.
//!
//! Buffers are raw device addresses ([`DevicePtr`]) and streams raw
//! `CUstream` handles ([`StreamHandle`]), as the JVM and Python frameworks
//! hand them over (`tensor.data_ptr()`, `torch.cuda.current_stream()`);
//! those entry points are `unsafe`. With the feature, safe wrappers take
//! cudarc's device slices and streams.
//!
//! Invariant: every rank calls the same collectives in the same order with
//! the same counts, types and roots, as NCCL requires; NCCL does not check
//! this, and a rank that skips a call leaves its peers' streams waiting (NCCL
//! has no timeout). After any failed call the communicator is unusable
//! (later calls return [`Error::Unusable`]) and is aborted, not destroyed,
//! when dropped.

#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod enabled;
#[cfg(feature = "cuda")]
mod library;
#[cfg(feature = "cuda")]
use enabled as backend;

#[cfg(not(feature = "cuda"))]
mod disabled;
#[cfg(not(feature = "cuda"))]
use disabled as backend;

use std::path::Path;

use crate::communicator::Communicator;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;

/// Whether this build has the NCCL backend (horovod-core's `cuda` feature).
/// Without it, [`NcclCommunicator::new`] returns [`Error::NoCudaSupport`].
pub const CUDA_SUPPORT: bool = cfg!(feature = "cuda");

/// An address in device memory (`CUdeviceptr`), as frameworks report it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DevicePtr(pub u64);

/// A CUDA stream (`CUstream` / `cudaStream_t`) owned by the caller; `0` is
/// the legacy default stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StreamHandle(pub u64);

/// One rank's NCCL communicator, bound to one CUDA device.
///
/// Created collectively from an established [`Communicator`]; see the
/// module documentation for the setup and the ordering rules.
#[derive(Debug)]
pub struct NcclCommunicator {
    inner: backend::Inner,
}

impl NcclCommunicator {
    /// Creates this rank's NCCL communicator on CUDA device `device_ordinal`
    /// (an index among the devices visible to this process), loading NCCL
    /// from the dynamic loader's search path (`libnccl.so.2`, then
    /// `libnccl.so`). Every rank of `comm` must call it.
    ///
    /// # Errors
    /// [`Error::NoCudaSupport`] in a build without the `cuda` feature;
    /// [`Error::NcclUnavailable`] on every rank when any rank lacks a
    /// driver, the device or NCCL (the message names the rank and what is
    /// missing); [`Error::Nccl`] when NCCL fails to set the communicator up;
    /// the errors of [`Communicator::broadcast`] when the mesh fails.
    pub fn new(comm: &mut Communicator, device_ordinal: usize) -> Result<NcclCommunicator> {
        backend::Inner::new(comm, device_ordinal, None).map(|inner| NcclCommunicator { inner })
    }

    /// As [`NcclCommunicator::new`], loading NCCL from the file `library`,
    /// e.g. the `nvidia/nccl/lib/libnccl.so.2` of the `nvidia-nccl-cu12`
    /// wheel.
    ///
    /// # Errors
    /// As [`NcclCommunicator::new`].
    pub fn with_library(
        comm: &mut Communicator,
        device_ordinal: usize,
        library: &Path,
    ) -> Result<NcclCommunicator> {
        backend::Inner::new(comm, device_ordinal, Some(library))
            .map(|inner| NcclCommunicator { inner })
    }

    /// This rank, as in the [`Communicator`] it was created from.
    pub fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.inner.size()
    }

    /// The CUDA device this rank's collectives run on.
    pub fn device_ordinal(&self) -> usize {
        self.inner.device_ordinal()
    }

    /// The loaded NCCL's version, e.g. "2.27.3".
    pub fn nccl_version(&self) -> String {
        self.inner.nccl_version()
    }

    /// Enqueues on `stream` the element-wise reduction with `op` of every
    /// rank's `count` elements at `send` into `recv` on every rank (`send ==
    /// recv` reduces in place). [`ReduceOp::Average`] is NCCL's `ncclAvg`.
    ///
    /// # Safety
    /// `send` and `recv` point to at least `count` elements of `dtype` in
    /// memory of this communicator's device that stay allocated until the
    /// work on `stream` completes; `recv` is not otherwise read or written
    /// meanwhile; `stream` is a live stream of the device's primary context
    /// (or 0).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null pointer with a non-zero count;
    /// [`Error::Nccl`] when NCCL refuses the call or an earlier operation
    /// failed asynchronously; [`Error::Unusable`] after an earlier error.
    pub unsafe fn allreduce(
        &mut self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: StreamHandle,
    ) -> Result<()> {
        let call = Call::AllReduce {
            send,
            recv,
            count,
            dtype,
            op,
        };
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.inner.enqueue(&call, stream) }
    }

    /// Enqueues on `stream` the copy of rank `root`'s `count` elements at
    /// `send` into `recv` on every rank (`send` is only read on the root;
    /// `send == recv` broadcasts in place).
    ///
    /// # Safety
    /// As [`NcclCommunicator::allreduce`], with `send` only needed on the
    /// root.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `root` is not a rank or a needed
    /// pointer is null; otherwise as [`NcclCommunicator::allreduce`].
    pub unsafe fn broadcast(
        &mut self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        let call = Call::Broadcast {
            send,
            recv,
            count,
            dtype,
            root,
        };
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.inner.enqueue(&call, stream) }
    }

    /// Enqueues on `stream` the gathering of every rank's `send_count`
    /// elements at `send` into `recv`, which receives `size * send_count`
    /// elements in rank order. Unlike the TCP allgather, every rank
    /// contributes the same count (as NCCL requires).
    ///
    /// # Safety
    /// As [`NcclCommunicator::allreduce`], with `send` holding `send_count`
    /// and `recv` `size * send_count` elements.
    ///
    /// # Errors
    /// As [`NcclCommunicator::allreduce`], and [`Error::InvalidArgument`]
    /// when `size * send_count` overflows.
    pub unsafe fn allgather(
        &mut self,
        send: DevicePtr,
        recv: DevicePtr,
        send_count: usize,
        dtype: DataType,
        stream: StreamHandle,
    ) -> Result<()> {
        let call = Call::AllGather {
            send,
            recv,
            send_count,
            dtype,
        };
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.inner.enqueue(&call, stream) }
    }

    /// Enqueues on `stream` the reduction with `op` of every rank's
    /// `size * recv_count` elements at `send`, leaving block `rank` of the
    /// result (`recv_count` elements) in `recv` on each rank.
    ///
    /// # Safety
    /// As [`NcclCommunicator::allreduce`], with `send` holding
    /// `size * recv_count` and `recv` `recv_count` elements.
    ///
    /// # Errors
    /// As [`NcclCommunicator::allgather`].
    pub unsafe fn reducescatter(
        &mut self,
        send: DevicePtr,
        recv: DevicePtr,
        recv_count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: StreamHandle,
    ) -> Result<()> {
        let call = Call::ReduceScatter {
            send,
            recv,
            recv_count,
            dtype,
            op,
        };
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.inner.enqueue(&call, stream) }
    }
}

/// One collective call, as the backend enqueues it. (Without the `cuda`
/// feature no backend reads it.)
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) enum Call {
    AllReduce {
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    },
    Broadcast {
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
    },
    AllGather {
        send: DevicePtr,
        recv: DevicePtr,
        send_count: usize,
        dtype: DataType,
    },
    ReduceScatter {
        send: DevicePtr,
        recv: DevicePtr,
        recv_count: usize,
        dtype: DataType,
        op: ReduceOp,
    },
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl Call {
    /// "allreduce of 1024 f32 (SUM)", for errors.
    pub(crate) fn describe(&self) -> String {
        match *self {
            Call::AllReduce {
                count, dtype, op, ..
            } => format!("allreduce of {count} {dtype} ({op})"),
            Call::Broadcast {
                count, dtype, root, ..
            } => format!("broadcast of {count} {dtype} from rank {root}"),
            Call::AllGather {
                send_count, dtype, ..
            } => format!("allgather of {send_count} {dtype} per rank"),
            Call::ReduceScatter {
                recv_count,
                dtype,
                op,
                ..
            } => format!("reducescatter to {recv_count} {dtype} per rank ({op})"),
        }
    }

    /// Checks what can be checked on the host: the root is a rank, element
    /// totals fit in `usize`, pointers this rank uses are not null.
    pub(crate) fn validate(&self, rank: usize, size: usize) -> Result<()> {
        let (used, count): (&[DevicePtr], usize) = match self {
            Call::AllReduce {
                send, recv, count, ..
            } => (&[*send, *recv], *count),
            Call::Broadcast {
                send,
                recv,
                count,
                root,
                ..
            } => {
                if *root >= size {
                    return Err(Error::InvalidArgument(format!(
                        "broadcast root {root} is not a rank of this job of {size} ranks"
                    )));
                }
                if rank == *root {
                    (&[*send, *recv], *count)
                } else {
                    (&[*recv], *count)
                }
            }
            Call::AllGather {
                send,
                recv,
                send_count,
                ..
            } => (&[*send, *recv], *send_count),
            Call::ReduceScatter {
                send,
                recv,
                recv_count,
                ..
            } => (&[*send, *recv], *recv_count),
        };
        if count.checked_mul(size).is_none() {
            return Err(Error::InvalidArgument(format!(
                "{}: {size} ranks of {count} elements overflow",
                self.describe()
            )));
        }
        if count > 0 && used.iter().any(|p| p.0 == 0) {
            return Err(Error::InvalidArgument(format!(
                "{}: null device pointer",
                self.describe()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    pub(super) use crate::communicator::tests::pair;

    /// On a host without a GPU (this one, in CI) creating a communicator is
    /// an error on every rank, never a panic or a hang; the mesh stays
    /// usable for CPU collectives. On a GPU host with NCCL it succeeds.
    #[test]
    fn nccl_communicator_without_a_gpu_is_a_clear_error_on_every_rank() {
        let (mut c0, mut c1) = pair();
        let other = thread::spawn(move || {
            let result = NcclCommunicator::new(&mut c1, 0).map(|_| ());
            (result, c1)
        });
        let mine = NcclCommunicator::new(&mut c0, 0).map(|_| ());
        let (theirs, mut c1) = other.join().unwrap();
        for result in [mine, theirs] {
            match (CUDA_SUPPORT, result) {
                (true, Ok(())) | (false, Err(Error::NoCudaSupport)) => {}
                (true, Err(err @ Error::NcclUnavailable { .. })) => {
                    let text = err.to_string();
                    assert!(text.starts_with("NCCL unavailable: "), "{text}");
                    assert!(text.contains("nvidia-nccl-cu12"), "{text}");
                }
                (built, other) => panic!("unexpected {other:?} (CUDA support: {built})"),
            }
        }
        let other = thread::spawn(move || c1.barrier());
        c0.barrier().unwrap();
        other.join().unwrap().unwrap();
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_cuda_feature_gpus_are_refused_with_no_cuda_support() {
        let mut single = Communicator::new(0, 1, vec![None]);
        let err = NcclCommunicator::new(&mut single, 0).unwrap_err();
        assert!(matches!(err, Error::NoCudaSupport), "{err}");
        assert!(err.to_string().contains("no CUDA support"), "{err}");
    }
}
