//! NCCL, loaded at run time: the shared library and the few entry points
//! the backend calls.
//!
//! Why not cudarc's NCCL bindings: their loader looks for `libnccl.so` and
//! names derived from the CUDA version, but NCCL's runtime packages (the
//! `nvidia-nccl-cu12`/`-cu13` wheels, the `libnccl2` system package) ship
//! only `libnccl.so.2`, its soname; and a library or symbol it cannot find
//! is a panic. Here the library is looked up by its soname first, a caller
//! may name the file, and every failure is an error.
//!
//! Invariant: values NCCL returns are read as C `int`s, never as Rust enums,
//! so a result code newer than this file is an unknown code, not undefined
//! behaviour. The enum values below are NCCL's stable ABI (`nccl.h`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::Path;

use libloading::Library;

use crate::dtype::DataType;
use crate::reduce::ReduceOp;

/// Names tried, in order, through the dynamic loader's search path
/// (`LD_LIBRARY_PATH`, the loader cache, the system directories) when the
/// caller names no file.
pub(crate) const DEFAULT_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// The oldest NCCL accepted, as `ncclGetVersion` encodes it: 2.10 added
/// bfloat16 and `ncclAvg`.
const MIN_VERSION: c_int = 21000;

/// `ncclUniqueId`: the address of rank 0's bootstrap listener, opaque.
pub(crate) use cudarc::nccl::sys::ncclUniqueId as UniqueId;

/// Size of `ncclUniqueId`.
pub(crate) const UNIQUE_ID_BYTES: usize = std::mem::size_of::<UniqueId>();

/// `ncclComm_t`.
pub(crate) type RawComm = *mut c_void;

/// `ncclResult_t`, `ncclDataType_t` and `ncclRedOp_t` are C enums: `int`.
type NcclResult = c_int;
const NCCL_SUCCESS: NcclResult = 0;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> NcclResult;
type CommInitRank = unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> NcclResult;
type CommFinish = unsafe extern "C" fn(RawComm) -> NcclResult;
type CommGetAsyncError = unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult;
type GetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> NcclResult;
type Broadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> NcclResult;
type AllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    RawComm,
    *mut c_void,
) -> NcclResult;
type ReduceScatter = AllReduce;

/// A loaded NCCL and its entry points. The function pointers stay valid as
/// long as `_library` is loaded, that is, as long as this value lives.
pub(crate) struct NcclLibrary {
    get_unique_id: GetUniqueId,
    comm_init_rank: CommInitRank,
    comm_destroy: CommFinish,
    comm_abort: CommFinish,
    comm_get_async_error: CommGetAsyncError,
    get_error_string: GetErrorString,
    all_reduce: AllReduce,
    broadcast: Broadcast,
    all_gather: AllGather,
    reduce_scatter: ReduceScatter,
    /// `ncclGetVersion`'s code, e.g. 22703 for 2.27.3.
    version: c_int,
    /// What was loaded, for messages.
    name: String,
    _library: Library,
}

impl std::fmt::Debug for NcclLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclLibrary")
            .field("name", &self.name)
            .field("version", &self.version_string())
            .finish()
    }
}

impl NcclLibrary {
    /// Loads NCCL from `path`, or by [`DEFAULT_NAMES`] when `None`, and
    /// resolves its entry points. The error says what was tried and why it
    /// failed, for [`crate::Error::NcclUnavailable`].
    pub(crate) fn load(path: Option<&Path>) -> Result<NcclLibrary, String> {
        let (library, name) = match path {
            Some(path) => {
                let name = path
                    .to_str()
                    .ok_or_else(|| format!("the NCCL path {path:?} is not valid UTF-8"))?
                    .to_owned();
                // SAFETY: loading NCCL runs its initialisers, which only set
                // up NCCL's own state.
                let library = unsafe { Library::new(name.as_str()) }
                    .map_err(|e| format!("{name} could not be loaded: {e}"))?;
                (library, name)
            }
            None => {
                let mut failures = Vec::new();
                let mut found = None;
                for name in DEFAULT_NAMES {
                    // SAFETY: as above.
                    match unsafe { Library::new(name) } {
                        Ok(library) => {
                            found = Some((library, name.to_owned()));
                            break;
                        }
                        Err(e) => failures.push(e.to_string()),
                    }
                }
                found.ok_or_else(|| {
                    format!(
                        "no NCCL library found on the loader's search path ({})",
                        failures.join("; ")
                    )
                })?
            }
        };
        // SAFETY: each type is the C signature of the symbol of that name in
        // nccl.h (2.10 and later), with enums as `int`.
        unsafe {
            let get_version: GetVersion = symbol(&library, &name, "ncclGetVersion")?;
            let mut version: c_int = 0;
            let result = get_version(&mut version);
            if result != NCCL_SUCCESS {
                return Err(format!("ncclGetVersion of {name} returned {result}"));
            }
            if version < MIN_VERSION {
                return Err(format!(
                    "{name} is NCCL {}; horovod-rs needs NCCL 2.10 or later",
                    version_string(version)
                ));
            }
            Ok(NcclLibrary {
                get_unique_id: symbol(&library, &name, "ncclGetUniqueId")?,
                comm_init_rank: symbol(&library, &name, "ncclCommInitRank")?,
                comm_destroy: symbol(&library, &name, "ncclCommDestroy")?,
                comm_abort: symbol(&library, &name, "ncclCommAbort")?,
                comm_get_async_error: symbol(&library, &name, "ncclCommGetAsyncError")?,
                get_error_string: symbol(&library, &name, "ncclGetErrorString")?,
                all_reduce: symbol(&library, &name, "ncclAllReduce")?,
                broadcast: symbol(&library, &name, "ncclBroadcast")?,
                all_gather: symbol(&library, &name, "ncclAllGather")?,
                reduce_scatter: symbol(&library, &name, "ncclReduceScatter")?,
                version,
                name,
                _library: library,
            })
        }
    }

    /// The version, e.g. "2.27.3".
    pub(crate) fn version_string(&self) -> String {
        version_string(self.version)
    }

    /// What was loaded: the path or library name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// NCCL's description of `result`, or `Ok` on success.
    fn check(&self, result: NcclResult) -> Result<(), String> {
        if result == NCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static string for any code
        // (a generic one for unknown codes), or null.
        let text = unsafe { (self.get_error_string)(result) };
        let text = if text.is_null() {
            "unknown error".to_owned()
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(format!(
            "{text} (NCCL error {result}; NCCL_DEBUG=WARN or INFO logs why)"
        ))
    }

    /// A new unique id: rank 0 calls it, the others receive its bytes.
    pub(crate) fn unique_id(&self) -> Result<UniqueId, String> {
        let mut id = UniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: `id` is a valid, writable ncclUniqueId.
        self.check(unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    /// `ncclCommInitRank`: blocks until all `size` ranks have joined.
    ///
    /// # Safety
    /// The CUDA context of the device the communicator is for must be
    /// current on the calling thread.
    pub(crate) unsafe fn init_rank(
        &self,
        size: c_int,
        id: UniqueId,
        rank: c_int,
    ) -> Result<RawComm, String> {
        let mut comm: RawComm = std::ptr::null_mut();
        self.check((self.comm_init_rank)(&mut comm, size, id, rank))?;
        Ok(comm)
    }

    /// Frees `comm`: `ncclCommDestroy` after success, `ncclCommAbort` (which
    /// does not wait for peers) after a failure.
    ///
    /// # Safety
    /// `comm` came from [`NcclLibrary::init_rank`] of this library and is
    /// not used afterwards.
    pub(crate) unsafe fn finish(&self, comm: RawComm, abort: bool) -> Result<(), String> {
        let finish = if abort {
            self.comm_abort
        } else {
            self.comm_destroy
        };
        self.check(finish(comm))
    }

    /// An error an earlier asynchronous operation on `comm` hit, if any.
    ///
    /// # Safety
    /// `comm` is a live communicator of this library.
    pub(crate) unsafe fn async_error(&self, comm: RawComm) -> Result<(), String> {
        let mut result: NcclResult = NCCL_SUCCESS;
        self.check((self.comm_get_async_error)(comm, &mut result))?;
        self.check(result)
    }

    /// Enqueues an allreduce of `count` elements on `stream`.
    ///
    /// # Safety
    /// See [`super::NcclCommunicator::allreduce`]; `comm` is live.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn all_reduce(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        comm: RawComm,
        stream: *mut c_void,
    ) -> Result<(), String> {
        self.check((self.all_reduce)(
            send,
            recv,
            count,
            nccl_dtype(dtype)?,
            nccl_op(op),
            comm,
            stream,
        ))
    }

    /// Enqueues a broadcast from `root` on `stream`.
    ///
    /// # Safety
    /// See [`super::NcclCommunicator::broadcast`]; `comm` is live.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn broadcast(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        root: c_int,
        comm: RawComm,
        stream: *mut c_void,
    ) -> Result<(), String> {
        self.check((self.broadcast)(
            send,
            recv,
            count,
            nccl_dtype(dtype)?,
            root,
            comm,
            stream,
        ))
    }

    /// Enqueues an allgather of `send_count` elements per rank on `stream`.
    ///
    /// # Safety
    /// See [`super::NcclCommunicator::allgather`]; `comm` is live.
    pub(crate) unsafe fn all_gather(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        dtype: DataType,
        comm: RawComm,
        stream: *mut c_void,
    ) -> Result<(), String> {
        self.check((self.all_gather)(
            send,
            recv,
            send_count,
            nccl_dtype(dtype)?,
            comm,
            stream,
        ))
    }

    /// Enqueues a reduce-scatter leaving `recv_count` elements per rank on
    /// `stream`.
    ///
    /// # Safety
    /// See [`super::NcclCommunicator::reducescatter`]; `comm` is live.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn reduce_scatter(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        recv_count: usize,
        dtype: DataType,
        op: ReduceOp,
        comm: RawComm,
        stream: *mut c_void,
    ) -> Result<(), String> {
        self.check((self.reduce_scatter)(
            send,
            recv,
            recv_count,
            nccl_dtype(dtype)?,
            nccl_op(op),
            comm,
            stream,
        ))
    }
}

/// Resolves `symbol` in `library` as a function of type `F`.
///
/// # Safety
/// `F` must be the symbol's true C signature.
unsafe fn symbol<F: Copy>(library: &Library, name: &str, symbol: &str) -> Result<F, String> {
    library
        .get::<F>(symbol)
        .map(|s| *s)
        .map_err(|e| format!("{name} has no {symbol} ({e}); horovod-rs needs NCCL 2.10 or later"))
}

/// "2.27.3" from NCCL's version code (`major * 10000 + minor * 100 + patch`
/// since 2.9; `major * 1000 + minor * 100 + patch` before).
fn version_string(code: c_int) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, code / 100 % 10, code % 100)
    }
}

/// `ncclDataType_t` of `dtype`; NCCL has no 16-bit integers.
pub(crate) fn nccl_dtype(dtype: DataType) -> Result<c_int, String> {
    Ok(match dtype {
        DataType::I16 => {
            return Err(
                "NCCL has no 16-bit integer type: reduce int16 tensors on the host (CPU tensors)"
                    .into(),
            )
        }
        DataType::I8 => 0,
        DataType::U8 => 1,
        DataType::I32 => 2,
        DataType::I64 => 4,
        DataType::F16 => 6,
        DataType::F32 => 7,
        DataType::F64 => 8,
        DataType::Bf16 => 9,
    })
}

/// `ncclRedOp_t` of `op`. NCCL's `ncclAvg` divides each rank's input by the
/// number of ranks before summing floats, and the sum after for integers
/// (truncating, as the CPU path does).
pub(crate) fn nccl_op(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Product => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
        ReduceOp::Average => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_of_both_encodings_read_right() {
        assert_eq!(version_string(22703), "2.27.3");
        assert_eq!(version_string(21003), "2.10.3");
        assert_eq!(version_string(2804), "2.8.4");
    }

    #[test]
    fn every_element_type_and_operation_has_a_distinct_nccl_code() {
        let dtypes: std::collections::HashSet<_> =
            DataType::ALL.into_iter().map(nccl_dtype).collect();
        assert_eq!(dtypes.len(), DataType::ALL.len());
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Average,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Product,
        ];
        let codes: std::collections::HashSet<_> = ops.into_iter().map(nccl_op).collect();
        assert_eq!(codes.len(), ops.len());
    }

    /// The codes written here by hand agree with cudarc's bindings of
    /// nccl.h.
    #[test]
    fn nccl_codes_match_the_bindings_of_nccl_h() {
        use cudarc::nccl::sys::{ncclDataType_t as T, ncclRedOp_t as O, ncclResult_t as R};
        let dtypes = [
            (DataType::I8, T::ncclInt8),
            (DataType::U8, T::ncclUint8),
            (DataType::I32, T::ncclInt32),
            (DataType::I64, T::ncclInt64),
            (DataType::F16, T::ncclFloat16),
            (DataType::Bf16, T::ncclBfloat16),
            (DataType::F32, T::ncclFloat32),
            (DataType::F64, T::ncclFloat64),
        ];
        for (dtype, code) in dtypes {
            assert_eq!(nccl_dtype(dtype), Ok(code as c_int), "{dtype}");
        }
        let ops = [
            (ReduceOp::Sum, O::ncclSum),
            (ReduceOp::Product, O::ncclProd),
            (ReduceOp::Max, O::ncclMax),
            (ReduceOp::Min, O::ncclMin),
            (ReduceOp::Average, O::ncclAvg),
        ];
        for (op, code) in ops {
            assert_eq!(nccl_op(op), code as c_int, "{op}");
        }
        assert_eq!(NCCL_SUCCESS, R::ncclSuccess as c_int);
        assert_eq!(UNIQUE_ID_BYTES, 128);
    }

    #[test]
    fn a_missing_library_file_is_an_error_naming_it() {
        let err = NcclLibrary::load(Some(Path::new("/nonexistent/libnccl.so.2"))).unwrap_err();
        assert!(
            err.starts_with("/nonexistent/libnccl.so.2 could not be loaded"),
            "{err}"
        );
    }

    #[test]
    fn a_library_without_nccl_symbols_is_an_error_not_a_panic() {
        // libc is loaded in every process and has no NCCL entry points.
        let err = NcclLibrary::load(Some(Path::new("libc.so.6"))).unwrap_err();
        assert!(err.contains("has no ncclGetVersion"), "{err}");
    }

    /// With `HOROVOD_TEST_NCCL_LIBRARY` naming a real NCCL (e.g. the
    /// `libnccl.so.2` of the `nvidia-nccl-cu12` wheel), loading it resolves
    /// every entry point and reads its version; no GPU is needed.
    #[test]
    fn a_real_nccl_loads_when_one_is_named() {
        let Some(path) = std::env::var_os("HOROVOD_TEST_NCCL_LIBRARY") else {
            return;
        };
        let library = NcclLibrary::load(Some(Path::new(&path))).unwrap();
        assert!(library.version >= MIN_VERSION, "{library:?}");
        eprintln!("loaded {library:?}");
    }
}
