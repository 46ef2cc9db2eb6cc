//! The engine's `native` methods of `horovod.rs.spark.HorovodNative`
//! (`exports::join` starts it): submit named tensors, poll or wait on their
//! handles, free them, close the engine.
//!
//! Java never runs on the engine's thread: a submission returns a tensor
//! handle at once, and the Java thread that wants the result waits on it
//! here, in bounded slices, so it can notice interruption between them.
//! Each submit export only builds its [`Operation`]; [`submit`] does the
//! rest for all of them.

use std::time::Duration;

use horovod_core::{
    DataType, Engine, Handle, Operation, Output, ReduceOp, Request, Result as CoreResult,
};
use jni::objects::{JClass, JObject, JPrimitiveArray, JString};
use jni::sys::{jdouble, jint, jlong};
use jni::{Env, EnvUnowned};

use crate::arrays::{array_from_output, request_from_array};
use crate::error_policy::{JniError, ThrowHorovodException};
use crate::exports::count;
use crate::handles::{borrow_mut, free_from_java, into_handle, take};

const ENGINE: &str = "engine";
const TENSOR: &str = "tensor handle";

/// A submitted tensor: its handle, and the element type its Java result has.
struct Tensor {
    handle: Handle,
    dtype: DataType,
}

/// Stops the engine on every rank and waits for this rank's thread.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_engineClose<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<Engine>(unowned_env, engine, ENGINE) }
}

/// Leaves the job saying why (the other ranks' errors quote `reason`): the
/// engine stops on every rank; this rank's is freed.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_engineLeave<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    reason: JString<'caller>,
) {
    unowned_env
        .with_env(|env| -> Result<(), JniError> {
            let reason = reason.try_to_string(env)?;
            // SAFETY: Java gives the handle up here and never passes it again.
            let mut engine = unsafe { take::<Engine>(engine, ENGINE) }?;
            engine.leave(&reason);
            Ok(())
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_submitAllreduce<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    name: JString<'caller>,
    data: JObject<'caller>,
    op: JString<'caller>,
    prescale: jdouble,
    postscale: jdouble,
) -> jlong {
    unowned_env
        .with_env(|env| {
            let operation = Operation::Allreduce {
                op: reduce_op(env, &op)?,
                prescale,
                postscale,
            };
            submit(env, engine, &name, &data, operation)
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_submitBroadcast<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    name: JString<'caller>,
    data: JObject<'caller>,
    root: jint,
) -> jlong {
    unowned_env
        .with_env(|env| {
            let root = count(root, "broadcast root")?;
            submit(env, engine, &name, &data, Operation::Broadcast { root })
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_submitAllgather<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    name: JString<'caller>,
    data: JObject<'caller>,
) -> jlong {
    unowned_env
        .with_env(|env| submit(env, engine, &name, &data, Operation::Allgather))
        .resolve::<ThrowHorovodException>()
}

/// Alltoall with `splits[p]` elements to rank `p`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_submitAlltoall<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    name: JString<'caller>,
    data: JObject<'caller>,
    splits: JPrimitiveArray<'caller, jint>,
) -> jlong {
    unowned_env
        .with_env(|env| {
            let mut raw = vec![0; splits.len(env)?];
            splits.get_region(env, 0, &mut raw)?;
            let splits = raw
                .into_iter()
                .map(|split| count(split, "alltoall split"))
                .collect::<Result<_, _>>()?;
            submit(env, engine, &name, &data, Operation::Alltoall { splits })
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_submitReducescatter<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    name: JString<'caller>,
    data: JObject<'caller>,
    op: JString<'caller>,
) -> jlong {
    unowned_env
        .with_env(|env| {
            let op = reduce_op(env, &op)?;
            submit(env, engine, &name, &data, Operation::Reducescatter { op })
        })
        .resolve::<ThrowHorovodException>()
}

/// A barrier: no data; its result is an empty `byte[]`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_submitBarrier<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    name: JString<'caller>,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            let request = Request {
                name: name.try_to_string(env)?,
                operation: Operation::Barrier,
                dtype: DataType::I8,
                shape: Vec::new(),
                data: Default::default(),
            };
            submit_request(engine, request)
        })
        .resolve::<ThrowHorovodException>()
}

/// The result as a new Java array of the input's type, or null while the
/// tensor is in flight. Throws the tensor's error.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tensorPoll<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    tensor: jlong,
) -> JObject<'caller> {
    unowned_env
        .with_env(|env| {
            // SAFETY: Java passes a live tensor handle and serialises calls on it.
            let tensor = unsafe { borrow_mut::<Tensor>(tensor, TENSOR)? };
            match tensor.handle.poll() {
                Some(result) => finished(env, tensor.dtype, result),
                None => Ok(JObject::null()),
            }
        })
        .resolve::<ThrowHorovodException>()
}

/// Waits at most `timeout_ms` for the result; null if the tensor is still
/// in flight then (the handle stays usable). Throws the tensor's error.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tensorWait<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    tensor: jlong,
    timeout_ms: jlong,
) -> JObject<'caller> {
    unowned_env
        .with_env(|env| {
            // SAFETY: Java passes a live tensor handle and serialises calls on it.
            let tensor = unsafe { borrow_mut::<Tensor>(tensor, TENSOR)? };
            let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
            let result = tensor.handle.wait(timeout);
            if result.is_err() && !tensor.handle.is_done() {
                // The wait itself timed out; the tensor is still in flight.
                return Ok(JObject::null());
            }
            finished(env, tensor.dtype, result)
        })
        .resolve::<ThrowHorovodException>()
}

/// Frees a tensor handle, whether or not its result was taken; the engine
/// finishes an in-flight tensor on its own and drops the result.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tensorFree<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    tensor: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<Tensor>(unowned_env, tensor, TENSOR) }
}

/// Submits `operation` on the elements of the Java array `data` as tensor
/// `name`; returns the tensor handle.
fn submit(
    env: &mut Env<'_>,
    engine: jlong,
    name: &JString<'_>,
    data: &JObject<'_>,
    operation: Operation,
) -> Result<jlong, JniError> {
    let name = name.try_to_string(env)?;
    let request = request_from_array(env, name, data, operation)?;
    submit_request(engine, request)
}

fn submit_request(engine: jlong, request: Request) -> Result<jlong, JniError> {
    // SAFETY: Java passes a live engine handle and serialises calls on it.
    let engine = unsafe { borrow_mut::<Engine>(engine, ENGINE)? };
    let dtype = request.dtype;
    let handle = engine.submit(request)?;
    Ok(into_handle(Tensor { handle, dtype }))
}

fn finished<'local>(
    env: &mut Env<'local>,
    dtype: DataType,
    result: CoreResult<Output>,
) -> Result<JObject<'local>, JniError> {
    array_from_output(env, dtype, &result?)
}

fn reduce_op(env: &Env<'_>, op: &JString<'_>) -> Result<ReduceOp, JniError> {
    let name = op.try_to_string(env)?;
    ReduceOp::from_name(&name)
        .ok_or_else(|| JniError::InvalidArgument(format!("unknown reduce op {name:?}")))
}
