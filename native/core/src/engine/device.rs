//! The backend of GPU tensors: their allreduces and broadcasts run with
//! NCCL, in place, enqueued on the caller's stream.

use log::warn;

use crate::error::{Error, Result};
use crate::nccl::NcclCommunicator;

use super::request::{Operation, Output, Request};
use super::transport::Transport;

/// NCCL for GPU tensors, set up at the first one (on every rank at the same
/// point, as the negotiation orders tensors alike); a setup error is kept and
/// fails every later GPU tensor the same way on every rank.
#[derive(Default)]
pub(crate) struct DeviceBackend {
    nccl: Option<Result<NcclCommunicator>>,
}

impl DeviceBackend {
    /// Enqueues a GPU tensor's allreduce or broadcast with NCCL on the
    /// caller's stream; the handle completes once it is enqueued (work the
    /// caller enqueues on that stream afterwards sees the result).
    /// `transport` sets NCCL up at the first GPU tensor.
    pub(crate) fn execute<T: Transport>(
        &mut self,
        transport: &mut T,
        request: &mut Request,
    ) -> Result<Output> {
        let Some(buffer) = request.data.device_buffer() else {
            return Err(Error::ControlMessage {
                detail: format!(
                    "'{}' was negotiated as a GPU tensor but is on the host here",
                    request.name
                ),
            });
        };
        let (ptr, stream, count) = (buffer.ptr, buffer.stream, buffer.len / request.dtype.size());
        let nccl = self.nccl(transport, buffer.device)?;
        match request.operation {
            Operation::Allreduce { op, .. } => {
                // SAFETY: `Payload::device`'s contract: `count` elements of
                // the communicator's device (checked by `nccl`), allocated
                // until the stream's work completes, unwritten meanwhile.
                unsafe { nccl.allreduce(ptr, ptr, count, request.dtype, op, stream)? }
            }
            Operation::Broadcast { root } => {
                // SAFETY: as above.
                unsafe { nccl.broadcast(ptr, ptr, count, request.dtype, root, stream)? }
            }
            ref other => {
                return Err(Error::Unsupported {
                    what: format!("{} of a GPU tensor", other.kind()),
                })
            }
        }
        Ok(Output {
            data: std::mem::take(&mut request.data),
            shape: request.shape.clone(),
        })
    }

    /// The NCCL communicator for `device`, set up on first use.
    fn nccl<T: Transport>(
        &mut self,
        transport: &mut T,
        device: usize,
    ) -> Result<&mut NcclCommunicator> {
        let setup = self.nccl.get_or_insert_with(|| {
            let setup = transport.nccl(device);
            if let Err(error) = &setup {
                warn!(
                    "rank {}: no NCCL for GPU tensors: {error}",
                    transport.rank()
                );
            }
            setup
        });
        match setup {
            Ok(nccl) => {
                let ordinal = nccl.device_ordinal();
                if ordinal != device {
                    return Err(Error::InvalidArgument(format!(
                        "a GPU tensor on cuda:{device}, but this rank's NCCL communicator is on cuda:{ordinal}"
                    )));
                }
                Ok(nccl)
            }
            Err(error) => Err(error.duplicate()),
        }
    }
}
