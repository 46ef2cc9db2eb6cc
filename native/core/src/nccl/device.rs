//! The CUDA device a rank's NCCL communicator runs on, opened through
//! cudarc's driver API (loaded at run time).
//!
//! cudarc panics when `libcuda` cannot be loaded or lacks a symbol; here the
//! library is probed first, and the calls that load symbols run under
//! `catch_unwind`, so a host without a driver gets an error, never a panic.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, DriverError};

/// What a host needs, appended to every "unavailable" reason.
pub(crate) const NEEDS: &str =
    "GPU collectives need an NVIDIA driver, a CUDA device and NCCL (pip install nvidia-nccl-cu12)";

/// Opens device `ordinal`'s primary context and makes it current on this
/// thread. The error is the reason for [`crate::Error::NcclUnavailable`].
pub(crate) fn open(ordinal: usize) -> Result<Arc<CudaContext>, String> {
    // SAFETY: only tries to load the driver library; loading it runs the
    // driver's initialisers, nothing of ours.
    if !unsafe { sys::is_culib_present() } {
        return Err(format!(
            "libcuda.so could not be loaded (no NVIDIA driver on this host); {NEEDS}"
        ));
    }
    let count = guarded("cuDeviceGetCount", CudaContext::device_count)
        .map_err(|e| format!("the CUDA driver could not be initialised: {e}; {NEEDS}"))?;
    let count = usize::try_from(count).unwrap_or(0);
    if count == 0 {
        return Err(format!(
            "the CUDA driver sees no device on this host; {NEEDS}"
        ));
    }
    if ordinal >= count {
        return Err(format!(
            "CUDA device {ordinal} does not exist: this host has {count} \
             (ordinals 0..{count}; CUDA_VISIBLE_DEVICES may hide some)"
        ));
    }
    guarded("opening the device", || CudaContext::new(ordinal))
        .map_err(|e| format!("CUDA device {ordinal} could not be opened: {e}"))
}

/// Runs a cudarc driver call, turning its error into a message and a panic
/// (a symbol this driver lacks) into an error as well.
pub(crate) fn guarded<T>(
    what: &str,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, String> {
    match panic::catch_unwind(AssertUnwindSafe(|| call().map_err(|e| describe(&e)))) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(format!(
                "{what}: the CUDA driver library is unusable: {message}"
            ))
        }
    }
}

/// "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected".
fn describe(error: &DriverError) -> String {
    let name = error
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", error.0));
    match error.error_string() {
        Ok(text) => format!("{name}: {}", text.to_string_lossy()),
        Err(_) => name,
    }
}
