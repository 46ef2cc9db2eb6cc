//! `horovod_rs._native`: the collective engine for Python.
//!
//! Thin: it converts between Python bytes and horovod-core requests and
//! releases the GIL while it waits, so other Python threads (autograd hooks,
//! data loaders) run meanwhile. Tensors cross as raw bytes plus dtype and
//! shape; the Python side (horovod_rs.torch) makes them tensors again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use horovod_core::launch::{failure, join_json, settings, Placement, RankSpec};
use horovod_core::nccl::{DevicePtr, StreamHandle};
use horovod_core::{
    DataType, Engine, Handle, Listener, Operation, Output, Payload, ReduceOp, RendezvousService,
    Request,
};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn py_err(error: horovod_core::Error) -> PyErr {
    use horovod_core::Error;
    match error {
        Error::Timeout { .. } => PyTimeoutError::new_err(error.to_string()),
        // The caller's own mistake, told at submission: Python's ValueError (Horovod's too).
        Error::InvalidArgument(_) | Error::DuplicateName { .. } => {
            PyValueError::new_err(error.to_string())
        }
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

fn dtype(name: &str) -> PyResult<DataType> {
    Ok(match name {
        "uint8" => DataType::U8,
        "int8" => DataType::I8,
        "int16" => DataType::I16,
        "int32" => DataType::I32,
        "int64" => DataType::I64,
        "float16" => DataType::F16,
        "bfloat16" => DataType::Bf16,
        "float32" => DataType::F32,
        "float64" => DataType::F64,
        other => {
            return Err(PyValueError::new_err(format!(
                "horovod_rs cannot reduce tensors of type {other}"
            )))
        }
    })
}

fn reduce_op(name: &str) -> PyResult<ReduceOp> {
    Ok(match name {
        "sum" => ReduceOp::Sum,
        "average" => ReduceOp::Average,
        "min" => ReduceOp::Min,
        "max" => ReduceOp::Max,
        "product" => ReduceOp::Product,
        other => return Err(PyValueError::new_err(format!("unknown reduce op {other}"))),
    })
}

/// A job's rendezvous service (the launcher's, the driver's, or rank 0's): the ranks exchange
/// their addresses through it.
#[pyclass]
struct Rendezvous {
    service: Option<RendezvousService>,
}

#[pymethods]
impl Rendezvous {
    #[new]
    fn new(secret: &[u8], size: usize) -> PyResult<Rendezvous> {
        let service = RendezvousService::start("0.0.0.0:0", secret, size).map_err(py_err)?;
        Ok(Rendezvous {
            service: Some(service),
        })
    }

    /// Rank 0's service, on the first free port of the job's (`rank_zero_ports`).
    #[staticmethod]
    fn for_rank_zero(secret: &[u8], size: usize) -> PyResult<Rendezvous> {
        let service = RendezvousService::start_for_rank_zero(secret, size).map_err(py_err)?;
        Ok(Rendezvous {
            service: Some(service),
        })
    }

    /// The port the service listens on.
    fn port(&self) -> PyResult<u16> {
        self.service
            .as_ref()
            .map(|s| s.port())
            .ok_or_else(|| PyRuntimeError::new_err("rendezvous closed"))
    }

    fn close(&mut self) {
        self.service = None;
    }
}

/// How often a wait wakes up to let Python run its signal handlers.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Waits at most `timeout_s` for `handle`'s result without holding the GIL, waking every
/// `SIGNAL_CHECK` so that Ctrl-C (or a test's timeout) raises here at once instead of after the
/// whole timeout.
fn wait_interruptibly(py: Python<'_>, handle: &mut Handle, timeout_s: f64) -> PyResult<Output> {
    let timeout = Duration::try_from_secs_f64(timeout_s)
        .map_err(|_| PyValueError::new_err(format!("invalid timeout {timeout_s} s")))?;
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let left = deadline.map_or(SIGNAL_CHECK, |d| {
            d.saturating_duration_since(Instant::now())
        });
        let slice = left.min(SIGNAL_CHECK);
        if py.allow_threads(|| handle.wait_ready(slice)) {
            return handle.wait(Duration::ZERO).map_err(py_err);
        }
        if left <= slice {
            return Err(py_err(horovod_core::Error::Timeout {
                what: format!(
                    "after {timeout:?} waiting for tensor '{}' to complete",
                    handle.name()
                ),
                rank: None,
            }));
        }
        py.check_signals()?;
    }
}

/// A submitted collective: wait for its result.
#[pyclass]
struct Work {
    handle: Option<Handle>,
}

#[pymethods]
impl Work {
    /// The result's bytes and shape, waiting at most `timeout_s` seconds.
    fn wait<'py>(
        &mut self,
        py: Python<'py>,
        timeout_s: f64,
    ) -> PyResult<(Bound<'py, PyBytes>, Vec<usize>)> {
        let mut handle = self
            .handle
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this handle was already waited on"))?;
        let output = wait_interruptibly(py, &mut handle, timeout_s)?;
        Ok((PyBytes::new(py, &output.data), output.shape))
    }

    /// Waits like `wait` and writes the result into `out` (a writable byte buffer of exactly the
    /// result's size, e.g. a tensor's memory), saving the copies of a new bytes object; nothing is
    /// copied when the collective ran in `out`'s memory (submitted with `in_place`).
    fn wait_into(
        &mut self,
        py: Python<'_>,
        out: PyBuffer<u8>,
        timeout_s: f64,
    ) -> PyResult<Vec<usize>> {
        let mut handle = self
            .handle
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this handle was already waited on"))?;
        let output = wait_interruptibly(py, &mut handle, timeout_s)?;
        if output.data.is_lent() && output.data.as_ptr() == out.buf_ptr() as *const u8 {
            return Ok(output.shape);
        }
        if out.readonly() || out.item_count() != output.data.len() {
            return Err(PyValueError::new_err(format!(
                "the output buffer holds {} bytes (read-only: {}), the result {}",
                out.item_count(),
                out.readonly(),
                output.data.len()
            )));
        }
        out.copy_from_slice(py, &output.data)?;
        Ok(output.shape)
    }

    /// Whether the result is ready.
    fn done(&self) -> bool {
        self.handle.as_ref().map(|h| h.is_done()).unwrap_or(true)
    }
}

/// This process's rank: its engine, connected to the other ranks.
#[pyclass]
struct Rank {
    engine: Engine,
    placement: Placement,
    spec: RankSpec,
}

#[pymethods]
impl Rank {
    /// Joins the job `spec` describes (a rank spec as JSON, through the driver's rendezvous
    /// service; Horovod's variables fill what it leaves out): listen, exchange addresses,
    /// connect, start the engine. Every rank must call it.
    #[new]
    fn new(py: Python<'_>, spec: &str, secret: Vec<u8>) -> PyResult<Rank> {
        py.allow_threads(move || join_rank(spec, &secret, None))
            .map_err(py_err)
    }

    fn rank(&self) -> usize {
        self.engine.rank()
    }

    fn size(&self) -> usize {
        self.engine.size()
    }

    fn local_rank(&self) -> usize {
        self.placement.local_rank
    }

    fn local_size(&self) -> usize {
        self.placement.local_size
    }

    fn cross_rank(&self) -> usize {
        self.placement.cross_rank
    }

    fn cross_size(&self) -> usize {
        self.placement.cross_size
    }

    /// Seconds a collective may wait on a silent peer (the spec's collective timeout).
    fn collective_timeout_s(&self) -> f64 {
        self.spec.collective_timeout.as_secs_f64()
    }

    /// The spec this rank joined with, as JSON: what a process set's ranks start from.
    fn spec(&self) -> PyResult<String> {
        serde_json::to_string(&self.spec).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Why this rank's engine has stopped, or None while it runs.
    fn stopped(&self) -> Option<String> {
        self.engine.stop_cause()
    }

    /// The ranks that left the job, each with the reason it gave, once the engine has stopped
    /// because ranks left (empty while it runs, or when it stopped on an error).
    fn departures(&self) -> Vec<(usize, String)> {
        self.engine
            .stopped()
            .map(|stopped| stopped.departures)
            .unwrap_or_default()
    }

    /// Leaves the job saying why (the other ranks' errors name this rank and `reason`); every
    /// rank's engine stops. Does nothing once the engine has stopped.
    fn leave(&mut self, py: Python<'_>, reason: &str) {
        py.allow_threads(|| self.engine.leave(reason));
    }

    /// Says a group of submissions follows, until `release()`: the engine negotiates them in one
    /// cycle (a hint; an unreleased hold delays one cycle by at most a second).
    fn hold(&self) {
        self.engine.hold();
    }

    /// Ends a `hold()`.
    fn release(&self) {
        self.engine.release();
    }

    /// Submits a named collective on `data` (`dtype` elements in `shape`); returns its handle.
    /// `kind` is allreduce, broadcast, allgather, alltoall, reducescatter, barrier or join.
    /// `in_place`: an allreduce or broadcast runs in `data`'s own memory (a writable, contiguous
    /// buffer), which the caller must neither read nor write until the handle is waited on.
    #[pyo3(signature = (kind, name, data, dtype_name, shape, op="sum", root=0, prescale=1.0, postscale=1.0, splits=None, in_place=false))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        py: Python<'_>,
        kind: &str,
        name: String,
        data: &Bound<'_, PyAny>,
        dtype_name: &str,
        shape: Vec<usize>,
        op: &str,
        root: usize,
        prescale: f64,
        postscale: f64,
        splits: Option<Vec<usize>>,
        in_place: bool,
    ) -> PyResult<Work> {
        if kind != "allreduce" && (prescale != 1.0 || postscale != 1.0) {
            // Only the engine's allreduce scales; accepting them elsewhere would drop them.
            return Err(PyValueError::new_err(format!(
                "{kind} takes no prescale or postscale factors (the engine scales allreduces only)"
            )));
        }
        let operation = match kind {
            "allreduce" => Operation::Allreduce {
                op: reduce_op(op)?,
                prescale,
                postscale,
            },
            "broadcast" => Operation::Broadcast { root },
            "allgather" => Operation::Allgather,
            "alltoall" => Operation::Alltoall {
                splits: splits.unwrap_or_default(),
            },
            "reducescatter" => Operation::Reducescatter { op: reduce_op(op)? },
            "barrier" => Operation::Barrier,
            "join" => Operation::Join,
            other => return Err(PyValueError::new_err(format!("unknown collective {other}"))),
        };
        let in_place = in_place
            && matches!(
                operation,
                Operation::Allreduce { .. } | Operation::Broadcast { .. }
            );
        let data = payload(py, data, in_place)?;
        self.submit_request(Request {
            name,
            operation,
            dtype: dtype(dtype_name)?,
            shape,
            data,
        })
    }

    /// Submits an allreduce or broadcast of a GPU tensor (`nbytes` at device address `ptr` on
    /// CUDA device `device`), run with NCCL in place, enqueued on `stream` (a `cudaStream_t`, 0
    /// for the default stream). `keeper` (the tensor) is held until the handle is waited on; the
    /// caller must not write the tensor until then. The handle completes once the collective is
    /// enqueued: work enqueued on `stream` afterwards sees the result.
    #[pyo3(signature = (kind, name, ptr, nbytes, device, stream, dtype_name, shape, keeper, op="sum", root=0))]
    #[allow(clippy::too_many_arguments)]
    fn submit_device(
        &self,
        kind: &str,
        name: String,
        ptr: u64,
        nbytes: usize,
        device: usize,
        stream: u64,
        dtype_name: &str,
        shape: Vec<usize>,
        keeper: &Bound<'_, PyAny>,
        op: &str,
        root: usize,
    ) -> PyResult<Work> {
        let operation = match kind {
            "allreduce" => Operation::allreduce(reduce_op(op)?),
            "broadcast" => Operation::Broadcast { root },
            other => {
                return Err(PyValueError::new_err(format!(
                    "{other} of GPU tensors does not run on NCCL"
                )))
            }
        };
        let keeper: Box<dyn Send> = Box::new(keeper.clone().unbind());
        // SAFETY: `keeper` is the tensor whose memory this is, held until the handle completes
        // and dropped after; its caching allocator reuses the memory only for work ordered after
        // ours on the same stream. The caller promises not to write it meanwhile.
        let data = unsafe {
            Payload::device(DevicePtr(ptr), nbytes, device, StreamHandle(stream), keeper)
        };
        self.submit_request(Request {
            name,
            operation,
            dtype: dtype(dtype_name)?,
            shape,
            data,
        })
    }
}

impl Rank {
    fn submit_request(&self, request: Request) -> PyResult<Work> {
        let handle = self.engine.submit(request).map_err(py_err)?;
        Ok(Work {
            handle: Some(handle),
        })
    }
}

/// Joins with the spec in `json`; Horovod's variables in this process's environment fill what
/// it leaves out.
fn join_rank(json: &str, secret: &[u8], listener: Option<Listener>) -> horovod_core::Result<Rank> {
    let joined = join_json(json, |name| std::env::var(name).ok(), secret, listener)?;
    Ok(Rank {
        engine: joined.engine,
        placement: joined.placement,
        spec: joined.spec,
    })
}

/// A rank of a new group (a process set) before it connects: its listener, whose port the
/// group's members exchange (through the job's engine) before they all call `connect`.
#[pyclass]
struct Joining {
    listener: Option<Listener>,
}

#[pymethods]
impl Joining {
    #[new]
    fn new() -> PyResult<Joining> {
        let listener = Listener::bind("0.0.0.0:0").map_err(py_err)?;
        Ok(Joining {
            listener: Some(listener),
        })
    }

    fn port(&self) -> PyResult<u16> {
        self.listener
            .as_ref()
            .map(|l| l.port())
            .ok_or_else(|| PyRuntimeError::new_err("already connected"))
    }

    /// Joins as the rank `spec` (a rank spec as JSON whose rendezvous holds the group's entries)
    /// describes, on this listener, and starts its engine.
    fn join(&mut self, py: Python<'_>, spec: &str, secret: Vec<u8>) -> PyResult<Rank> {
        let listener = self
            .listener
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("already connected"))?;
        py.allow_threads(move || join_rank(spec, &secret, Some(listener)))
            .map_err(py_err)
    }
}

/// The environment variables the native side reads into a rank's spec (Horovod's knobs): what a
/// driver hands its ranks.
#[pyfunction]
fn spec_variables() -> Vec<&'static str> {
    settings::spec_variables().collect()
}

/// Every Horovod variable of the table of settings, the driver's own included: what a driver
/// passes to `job_settings`.
#[pyfunction]
fn setting_variables() -> Vec<&'static str> {
    settings::variables().collect()
}

/// Every `spark.horovod.rs.*` key of the table of settings.
#[pyfunction]
fn setting_keys() -> Vec<&'static str> {
    settings::keys().collect()
}

/// A job's settings from the Spark conf `keys` and Horovod's `variables` the driver sees (a key
/// wins over its variable), as JSON: `{"spec": {the rank-spec fields set}, "driver":
/// {"start_timeout_s", "fit_attempts", "gpus_per_rank", "driver_rendezvous"}}`. ValueError names
/// a bad key or variable with its value.
#[pyfunction]
fn job_settings(
    keys: HashMap<String, String>,
    variables: HashMap<String, String>,
) -> PyResult<String> {
    let settings = horovod_core::launch::job_settings(
        |key| keys.get(key).cloned(),
        |name| variables.get(name).cloned(),
    )
    .map_err(py_err)?;
    serde_json::to_string(&settings).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Whether Spark's failure `text` says a task was lost with its executor or Python worker.
/// The candidate ports of the job's rank-0 rendezvous service, in the order rank 0 tries them.
#[pyfunction]
fn rank_zero_ports(secret: &[u8]) -> Vec<u16> {
    horovod_core::rank_zero_ports(secret)
}

/// Where a rank registers with rank 0's service on `host`: the candidates, comma-separated.
#[pyfunction]
fn rank_zero_candidates(host: &str, secret: &[u8]) -> String {
    horovod_core::rank_zero_candidates(host, secret)
}

#[pyfunction]
fn rank_lost(text: &str) -> bool {
    failure::rank_lost(text)
}

/// Whether a rank's error `text` only follows another rank's failure.
#[pyfunction]
fn follows_peer(text: &str) -> bool {
    failure::follows_peer(text)
}

/// Why a rank of a Spark job leaves it now: its function returned (`error` None) or failed with
/// `error`; the words the other ranks' errors quote.
#[pyfunction]
#[pyo3(signature = (error=None))]
fn departure(error: Option<&str>) -> String {
    failure::departure(error, unix_seconds())
}

/// Whether a departure's `reason` says the rank's function failed.
#[pyfunction]
fn departed_failing(reason: &str) -> bool {
    failure::departed_failing(reason)
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Whether this build runs GPU tensors' collectives on NCCL (the `cuda` feature).
#[pyfunction]
fn cuda_built() -> bool {
    horovod_core::nccl::CUDA_SUPPORT
}

/// Sends horovod-rs's log records to `next_log_record` (true) or to standard error (false).
#[pyfunction]
fn forward_logs(on: bool) {
    horovod_core::logging::forward(on);
}

/// Lets records at or above `level` (trace, debug, info, warning, error, off) through.
#[pyfunction]
fn set_log_level(level: &str) -> PyResult<()> {
    let level = horovod_core::logging::parse_level(level)
        .ok_or_else(|| PyValueError::new_err(format!("unknown log level {level:?}")))?;
    horovod_core::logging::set_level(level);
    Ok(())
}

/// Writes a forwarded record to standard error in horovod-rs's own format (for a process whose
/// logging is not configured).
#[pyfunction]
fn log_to_stderr(level: &str, message: &str) {
    horovod_core::logging::write_stderr(level, message);
}

/// The next forwarded record as `(level, target, message)`, waiting up to `timeout_s` seconds
/// without the GIL; None when none came.
#[pyfunction]
fn next_log_record(py: Python<'_>, timeout_s: f64) -> PyResult<Option<(String, String, String)>> {
    let timeout = Duration::try_from_secs_f64(timeout_s)
        .map_err(|_| PyValueError::new_err(format!("invalid timeout {timeout_s} s")))?;
    let line = py.allow_threads(|| horovod_core::logging::next_forwarded(timeout));
    Ok(line.map(|line| (line.level.to_string(), line.target, line.message)))
}

/// `data`'s bytes for a request: its own memory when `in_place` (the request keeps a reference to
/// `data`, so the memory outlives the collective), else a copy.
fn payload(py: Python<'_>, data: &Bound<'_, PyAny>, in_place: bool) -> PyResult<Payload> {
    let buffer = PyBuffer::<u8>::get(data)?;
    if !in_place {
        return Ok(buffer.to_vec(py)?.into());
    }
    if buffer.readonly() || !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "an in-place collective needs a writable, contiguous buffer",
        ));
    }
    let keeper: Box<dyn Send> = Box::new(data.clone().unbind());
    // SAFETY: `keeper` holds the exporting object, whose memory (a numpy array over a tensor's
    // storage, which cannot be resized while referenced) stays put while it lives; the caller
    // promises not to touch it until the handle is waited on. Dropping `keeper` off the GIL only
    // queues the reference count decrement, so the engine's thread never waits for the GIL.
    Ok(unsafe { Payload::lent(buffer.buf_ptr().cast::<u8>(), buffer.item_count(), keeper) })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Rendezvous>()?;
    m.add_class::<Rank>()?;
    horovod_core::logging::install_stderr_logger_from_env();
    m.add_class::<Work>()?;
    m.add_class::<Joining>()?;
    m.add_function(wrap_pyfunction!(cuda_built, m)?)?;
    m.add_function(wrap_pyfunction!(rank_zero_ports, m)?)?;
    m.add_function(wrap_pyfunction!(rank_zero_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(spec_variables, m)?)?;
    m.add_function(wrap_pyfunction!(setting_variables, m)?)?;
    m.add_function(wrap_pyfunction!(setting_keys, m)?)?;
    m.add_function(wrap_pyfunction!(job_settings, m)?)?;
    m.add_function(wrap_pyfunction!(rank_lost, m)?)?;
    m.add_function(wrap_pyfunction!(follows_peer, m)?)?;
    m.add_function(wrap_pyfunction!(departure, m)?)?;
    m.add_function(wrap_pyfunction!(departed_failing, m)?)?;
    // Marks an exchanged entry that carries a rank's error instead of its address.
    m.add_function(wrap_pyfunction!(forward_logs, m)?)?;
    m.add_function(wrap_pyfunction!(set_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(next_log_record, m)?)?;
    m.add_function(wrap_pyfunction!(log_to_stderr, m)?)?;
    Ok(())
}
