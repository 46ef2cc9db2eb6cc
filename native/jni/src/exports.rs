//! The `native` methods of `horovod.rs.spark.HorovodNative` that set a rank
//! up: the rendezvous listener, the connection to every rank, the driver's
//! rendezvous service. The engine's live in `engine_exports`.
//!
//! Each export: convert arguments, call `horovod_core`, convert the result.

use std::time::Duration;

use horovod_core::{
    exchange_entries, CommConfig, Communicator, Listener, RendezvousService, Transport,
    TLS_VARIABLE,
};
use jni::objects::{JByteArray, JClass, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::EnvUnowned;

use crate::error_policy::{JniError, ThrowHorovodException};
use crate::handles::{borrow_mut, free_from_java, into_handle, take};

const LISTENER: &str = "rendezvous listener";
pub(crate) const COMMUNICATOR: &str = "communicator";
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
            // Horovod's knob, from the executor's environment (spark.executorEnv.*).
            let hierarchical = std::env::var("HOROVOD_HIERARCHICAL_ALLREDUCE").ok();
            let config = CommConfig {
                connect_timeout: millis(connect_timeout_ms, "connect timeout")?,
                io_timeout: millis(io_timeout_ms, "io timeout")?,
                transport: Transport::for_hierarchical_setting(hierarchical.as_deref()),
                tls: horovod_core::tls_setting(std::env::var(TLS_VARIABLE).ok().as_deref())?,
            };
            let communicator = horovod_core::connect(listener, rank, &addresses, &secret, &config)?;
            Ok(into_handle(communicator))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_closeCommunicator<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    communicator: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<Communicator>(unowned_env, communicator, COMMUNICATOR) }
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
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    service: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<RendezvousService>(unowned_env, service, SERVICE) }
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
