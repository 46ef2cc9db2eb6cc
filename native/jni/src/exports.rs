//! The `native` methods of `horovod.rs.spark.HorovodNative`, one function each.
//!
//! Each export: convert arguments, call `horovod_core`, convert the result.
//! The collectives take any Java primitive array the engine has an element
//! type for (`byte[]`, `int[]`, `long[]`, `float[]`, `double[]`): one export
//! per collective, one generic path ([`on_array`]) from array to elements and
//! back.
//! Bulk data crosses with one region copy in and one out (no per-element JNI
//! calls); the Java array is not pinned while the collective blocks, so the
//! garbage collector is never held up by a slow peer.

use std::time::Duration;

use horovod_core::{
    exchange_entries, AllreduceOptions, CommConfig, Communicator, Element, Listener, ReduceOp,
    RendezvousService, Result as CoreResult,
};
use jni::objects::{JByteArray, JClass, JObject, JPrimitiveArray, JString, TypeArray};
use jni::sys::{jbyte, jdouble, jfloat, jint, jlong};
use jni::{Env, EnvUnowned};

use crate::error_policy::{JniError, ThrowHorovodException};
use crate::handles::{borrow_mut, into_handle, take};

const LISTENER: &str = "rendezvous listener";
const COMMUNICATOR: &str = "communicator";
const SERVICE: &str = "rendezvous service";

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_listen<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    bind_address: JString<'caller>,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            let bind_address = bind_address.try_to_string(env)?;
            Ok(into_handle(Listener::bind(&bind_address)?))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_listenerPort<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    listener: jlong,
) -> jint {
    unowned_env
        .with_env(|_env| -> Result<jint, JniError> {
            // SAFETY: Java passes a live listener handle and serialises calls on it.
            let listener = unsafe { borrow_mut::<Listener>(listener, LISTENER)? };
            Ok(jint::from(listener.port()))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_closeListener<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    listener: jlong,
) {
    unowned_env
        .with_env(|_env| -> Result<(), JniError> {
            // SAFETY: Java gives the handle up here and never passes it again.
            drop(unsafe { take::<Listener>(listener, LISTENER)? });
            Ok(())
        })
        .resolve::<ThrowHorovodException>()
}

/// Consumes the listener (Java forgets its handle before calling) and returns
/// a communicator handle. `addresses` holds one `host:port` per rank, one per line.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_connect<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    listener: jlong,
    rank: jint,
    addresses: JString<'caller>,
    secret: JByteArray<'caller>,
    connect_timeout_ms: jlong,
    io_timeout_ms: jlong,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            // SAFETY: Java hands the listener over here and never passes it again.
            let listener = unsafe { take::<Listener>(listener, LISTENER)? };
            let addresses: Vec<String> = addresses
                .try_to_string(env)?
                .lines()
                .map(str::to_owned)
                .collect();
            let secret = env.convert_byte_array(&secret)?;
            let rank = count(rank, "rank")?;
            let config = CommConfig {
                connect_timeout: millis(connect_timeout_ms, "connect timeout")?,
                io_timeout: millis(io_timeout_ms, "io timeout")?,
                ..CommConfig::default()
            };
            let communicator = horovod_core::connect(listener, rank, &addresses, &secret, &config)?;
            Ok(into_handle(communicator))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_closeCommunicator<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
) {
    unowned_env
        .with_env(|_env| -> Result<(), JniError> {
            // SAFETY: Java gives the handle up here and never passes it again.
            drop(unsafe { take::<Communicator>(communicator, COMMUNICATOR)? });
            Ok(())
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_barrier<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
) {
    unowned_env
        .with_env(|_env| -> Result<(), JniError> {
            // SAFETY: Java passes a live handle and serialises calls on it.
            let communicator = unsafe { borrow_mut::<Communicator>(communicator, COMMUNICATOR)? };
            Ok(communicator.barrier()?)
        })
        .resolve::<ThrowHorovodException>()
}

/// Allreduce with scale factors; returns a new array of the input's type.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_allreduce<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
    data: JObject<'caller>,
    op: JString<'caller>,
    prescale: jdouble,
    postscale: jdouble,
) -> JObject<'caller> {
    unowned_env
        .with_env(|env| {
            let options = AllreduceOptions::new(reduce_op(env, &op)?)
                .with_prescale(prescale)
                .with_postscale(postscale);
            on_array(env, communicator, &data, Allreduce(options))
        })
        .resolve::<ThrowHorovodException>()
}

/// Broadcast from `root`; returns a new array holding the root's data.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_broadcast<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
    data: JObject<'caller>,
    root: jint,
) -> JObject<'caller> {
    unowned_env
        .with_env(|env| {
            let root = count(root, "broadcast root")?;
            on_array(env, communicator, &data, Broadcast(root))
        })
        .resolve::<ThrowHorovodException>()
}

/// Allgather; returns every rank's array concatenated in rank order.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_allgather<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
    data: JObject<'caller>,
) -> JObject<'caller> {
    unowned_env
        .with_env(|env| on_array(env, communicator, &data, Allgather))
        .resolve::<ThrowHorovodException>()
}

/// Alltoall with `splits[p]` elements to rank `p`; returns the blocks
/// received, concatenated in rank order.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_alltoall<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
    data: JObject<'caller>,
    splits: JPrimitiveArray<'caller, jint>,
) -> JObject<'caller> {
    unowned_env
        .with_env(|env| {
            let mut raw = vec![0; splits.len(env)?];
            splits.get_region(env, 0, &mut raw)?;
            let splits = raw
                .into_iter()
                .map(|split| count(split, "alltoall split"))
                .collect::<Result<_, _>>()?;
            on_array(env, communicator, &data, Alltoall(splits))
        })
        .resolve::<ThrowHorovodException>()
}

/// Reducescatter; returns this rank's segment of the reduction.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_reducescatter<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
    data: JObject<'caller>,
    op: JString<'caller>,
) -> JObject<'caller> {
    unowned_env
        .with_env(|env| {
            let op = reduce_op(env, &op)?;
            on_array(env, communicator, &data, Reducescatter(op))
        })
        .resolve::<ThrowHorovodException>()
}

/// A collective on the elements of one Java primitive array, whatever their
/// type: [`on_array`] finds the type and calls `run` with it.
trait ArrayCollective {
    /// Runs the collective on a copy of the array's elements and returns the
    /// elements of the array to give back to Java.
    fn run<T: Element>(self, communicator: &mut Communicator, data: Vec<T>) -> CoreResult<Vec<T>>;
}

struct Allreduce(AllreduceOptions);
struct Broadcast(usize);
struct Allgather;
struct Alltoall(Vec<usize>);
struct Reducescatter(ReduceOp);

impl ArrayCollective for Allreduce {
    fn run<T: Element>(self, comm: &mut Communicator, mut data: Vec<T>) -> CoreResult<Vec<T>> {
        comm.allreduce_with(&mut data, self.0)?;
        Ok(data)
    }
}

impl ArrayCollective for Broadcast {
    fn run<T: Element>(self, comm: &mut Communicator, mut data: Vec<T>) -> CoreResult<Vec<T>> {
        comm.broadcast(&mut data, self.0)?;
        Ok(data)
    }
}

impl ArrayCollective for Allgather {
    fn run<T: Element>(self, comm: &mut Communicator, data: Vec<T>) -> CoreResult<Vec<T>> {
        Ok(comm.allgather(&data)?.0)
    }
}

impl ArrayCollective for Alltoall {
    fn run<T: Element>(self, comm: &mut Communicator, data: Vec<T>) -> CoreResult<Vec<T>> {
        Ok(comm.alltoall(&data, &self.0)?.0)
    }
}

impl ArrayCollective for Reducescatter {
    fn run<T: Element>(self, comm: &mut Communicator, data: Vec<T>) -> CoreResult<Vec<T>> {
        comm.reducescatter(&data, self.0)
    }
}

/// Runs `collective` on the communicator behind `communicator` with the
/// elements of `data`, a `byte[]`, `int[]`, `long[]`, `float[]` or
/// `double[]`, and returns a new array of the same type.
fn on_array<'local>(
    env: &mut Env<'local>,
    communicator: jlong,
    data: &JObject<'_>,
    collective: impl ArrayCollective,
) -> Result<JObject<'local>, JniError> {
    // SAFETY: Java passes a live handle and serialises calls on it.
    let communicator = unsafe { borrow_mut::<Communicator>(communicator, COMMUNICATOR)? };
    macro_rules! try_type {
        ($($t:ty),*) => {$(
            if let Ok(array) = env.as_cast::<JPrimitiveArray<$t>>(data) {
                let array: &JPrimitiveArray<$t> = &array;
                return on_typed_array(env, communicator, array, collective);
            }
        )*};
    }
    try_type!(jbyte, jint, jlong, jfloat, jdouble);
    Err(JniError::InvalidArgument(
        "collectives take byte[], int[], long[], float[] or double[] data".into(),
    ))
}

/// Copies `data` out, runs `collective`, and returns the result as a new
/// Java array.
fn on_typed_array<'local, T>(
    env: &mut Env<'local>,
    communicator: &mut Communicator,
    data: &JPrimitiveArray<'_, T>,
    collective: impl ArrayCollective,
) -> Result<JObject<'local>, JniError>
where
    T: TypeArray + Element + Default,
{
    let mut buffer = vec![T::default(); data.len(env)?];
    data.get_region(env, 0, &mut buffer)?;
    let out = collective.run(communicator, buffer)?;
    let result = JPrimitiveArray::<T>::new(env, out.len())?;
    result.set_region(env, 0, &out)?;
    Ok(result.into())
}

fn reduce_op(env: &Env<'_>, op: &JString<'_>) -> Result<ReduceOp, JniError> {
    let name = op.try_to_string(env)?;
    ReduceOp::from_name(&name)
        .ok_or_else(|| JniError::InvalidArgument(format!("unknown reduce op {name:?}")))
}

fn millis(value: jlong, what: &str) -> Result<Duration, JniError> {
    u64::try_from(value)
        .ok()
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| {
            JniError::InvalidArgument(format!("{what} must be positive, got {value} ms"))
        })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_startRendezvousService<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    bind_address: JString<'caller>,
    secret: JByteArray<'caller>,
    size: jint,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            let bind_address = bind_address.try_to_string(env)?;
            let secret = env.convert_byte_array(&secret)?;
            let size = count(size, "size")?;
            Ok(into_handle(RendezvousService::start(
                &bind_address,
                &secret,
                size,
            )?))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_rendezvousServicePort<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    service: jlong,
) -> jint {
    unowned_env
        .with_env(|_env| -> Result<jint, JniError> {
            // SAFETY: Java passes a live service handle and serialises calls on it.
            let service = unsafe { borrow_mut::<RendezvousService>(service, SERVICE)? };
            Ok(jint::from(service.port()))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_stopRendezvousService<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    service: jlong,
) {
    unowned_env
        .with_env(|_env| -> Result<(), JniError> {
            // SAFETY: Java gives the handle up here and never passes it again.
            drop(unsafe { take::<RendezvousService>(service, SERVICE)? });
            Ok(())
        })
        .resolve::<ThrowHorovodException>()
}

/// Registers this rank's entry with the driver's service and returns every
/// rank's entry, one per line, in rank order.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_exchangeEntries<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    service_address: JString<'caller>,
    secret: JByteArray<'caller>,
    rank: jint,
    size: jint,
    attempt: jint,
    entry: JString<'caller>,
    timeout_ms: jlong,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let service_address = service_address.try_to_string(env)?;
            let secret = env.convert_byte_array(&secret)?;
            let entry = entry.try_to_string(env)?;
            let entries = exchange_entries(
                &service_address,
                &secret,
                count(rank, "rank")?,
                count(size, "size")?,
                u32::try_from(attempt).map_err(|_| {
                    JniError::InvalidArgument(format!("stage attempt {attempt} is negative"))
                })?,
                &entry,
                millis(timeout_ms, "rendezvous timeout")?,
            )?;
            Ok(JString::from_str(env, entries.join("\n"))?)
        })
        .resolve::<ThrowHorovodException>()
}

fn count(value: jint, what: &str) -> Result<usize, JniError> {
    usize::try_from(value)
        .map_err(|_| JniError::InvalidArgument(format!("{what} {value} is negative")))
}
