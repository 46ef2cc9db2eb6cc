//! The NCCL backend of a build without the `cuda` feature: creating a
//! communicator fails with [`Error::NoCudaSupport`], so no value of
//! [`Inner`] can exist and its methods are unreachable.

use std::path::Path;

use super::{Call, StreamHandle};
use crate::communicator::Communicator;
use crate::error::{Error, Result};

/// Uninhabited: there is no communicator without CUDA support.
#[derive(Debug)]
pub(super) enum Inner {}

impl Inner {
    pub(super) fn new(
        _comm: &mut Communicator,
        _device_ordinal: usize,
        _library: Option<&Path>,
    ) -> Result<Inner> {
        Err(Error::NoCudaSupport)
    }

    pub(super) fn rank(&self) -> usize {
        match *self {}
    }

    pub(super) fn size(&self) -> usize {
        match *self {}
    }

    pub(super) fn device_ordinal(&self) -> usize {
        match *self {}
    }

    pub(super) fn nccl_version(&self) -> String {
        match *self {}
    }

    /// # Safety
    /// Unreachable; see [`super::NcclCommunicator::allreduce`].
    pub(super) unsafe fn enqueue(&mut self, _call: &Call, _stream: StreamHandle) -> Result<()> {
        match *self {}
    }
}
