//! The `native` methods of `horovod.rs.spark.HorovodNative` that set a rank
//! up: the rendezvous listener, joining the job, the driver's rendezvous
//! service. The engine's live in `engine_exports`.
//!
//! Each export: convert arguments, call `horovod_core`, convert the result.

use std::time::Duration;

use horovod_core::launch::join_json;
use horovod_core::{Listener, RendezvousService};
use jni::objects::{JByteArray, JClass, JLongArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::EnvUnowned;

use crate::error_policy::{JniError, ThrowHorovodException};
use crate::handles::{borrow_mut, free_from_java, into_handle, take};

const LISTENER: &str = "rendezvous listener";
const SERVICE: &str = "rendezvous service";

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_listen<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    bind_address: JString<'caller>,
) -> jlong {
    // Every rank listens first: from here on the engine's warnings reach the executor's log.
    horovod_core::logging::install_stderr_logger_from_env();
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
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    listener: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<Listener>(unowned_env, listener, LISTENER) }
}

/// Joins the job `spec` describes (a `RankSpec` as JSON; Horovod's variables in the executor's
/// environment fill what it leaves out) and returns `{engine handle, local rank, local size,
/// cross rank, cross size}`. `listener` is this rank's listener handle, consumed (Java forgets it
/// before calling), or 0 when `join` binds one itself.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_join<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    listener: jlong,
    spec: JString<'caller>,
    secret: JByteArray<'caller>,
) -> JLongArray<'caller> {
    unowned_env
        .with_env(|env| -> Result<JLongArray<'caller>, JniError> {
            // Joining may be a rank's first native call: from here on the engine's warnings
            // reach the executor's log.
            horovod_core::logging::install_stderr_logger_from_env();
            let listener = match listener {
                0 => None,
                // SAFETY: Java hands the listener over here and never passes it again.
                handle => Some(unsafe { take::<Listener>(handle, LISTENER)? }),
            };
            let spec = spec.try_to_string(env)?;
            let secret = env.convert_byte_array(&secret)?;
            let joined = join_json(&spec, |name| std::env::var(name).ok(), &secret, listener)?;
            let placement = joined.placement;
            let numbers = [
                into_handle(joined.engine),
                placement.local_rank as jlong,
                placement.local_size as jlong,
                placement.cross_rank as jlong,
                placement.cross_size as jlong,
            ];
            let array = env.new_long_array(numbers.len())?;
            array.set_region(env, 0, &numbers)?;
            Ok(array)
        })
        .resolve::<ThrowHorovodException>()
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

/// Rank 0's rendezvous service for a job of `size` ranks, on the first free port of the job's.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_startRankZeroRendezvousService<
    'caller,
>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    secret: JByteArray<'caller>,
    size: jint,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            let secret = env.convert_byte_array(&secret)?;
            let size = count(size, "size")?;
            Ok(into_handle(RendezvousService::start_for_rank_zero(
                &secret, size,
            )?))
        })
        .resolve::<ThrowHorovodException>()
}

/// Where a rank registers with rank 0's service on `host`: the candidates, comma-separated.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_rankZeroCandidates<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    host: JString<'caller>,
    secret: JByteArray<'caller>,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let host = host.try_to_string(env)?;
            let secret = env.convert_byte_array(&secret)?;
            let candidates = horovod_core::rank_zero_candidates(&host, &secret);
            Ok(JString::from_str(env, candidates)?)
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
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    service: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<RendezvousService>(unowned_env, service, SERVICE) }
}

pub(crate) fn count(value: jint, what: &str) -> Result<usize, JniError> {
    usize::try_from(value)
        .map_err(|_| JniError::InvalidArgument(format!("{what} {value} is negative")))
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_forwardLogs<'caller>(
    _unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    on: jboolean,
) {
    horovod_core::logging::forward(on);
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_setLogLevel<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    level: JString<'caller>,
) {
    unowned_env
        .with_env(|env| -> Result<(), JniError> {
            let level = level.try_to_string(env)?;
            let filter = horovod_core::logging::parse_level(&level)
                .ok_or_else(|| JniError::InvalidArgument(format!("unknown log level {level:?}")))?;
            horovod_core::logging::set_level(filter);
            Ok(())
        })
        .resolve::<ThrowHorovodException>()
}

/// The next forwarded log record as `level \t rank \t target \t message` (rank empty when no
/// engine thread logged it), or an empty string when none came within `timeout_ms`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_nextLogRecord<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    timeout_ms: jlong,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let timeout = millis(timeout_ms, "log wait")?;
            let record =
                horovod_core::logging::next_forwarded(timeout).map_or_else(String::new, |line| {
                    let rank = line.rank.map_or_else(String::new, |rank| rank.to_string());
                    format!("{}\t{rank}\t{}\t{}", line.level, line.target, line.message)
                });
            Ok(JString::from_str(env, record)?)
        })
        .resolve::<ThrowHorovodException>()
}
