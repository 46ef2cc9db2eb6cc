//! The trainer's `native` methods of `horovod.rs.spark.HorovodNative`:
//! create a trainer on a rank's table and engine, run epochs, take
//! checkpoints and the model; load a model and predict on a table.
//!
//! The engine is passed to every collective call rather than kept in the
//! trainer: Java owns both and closes the trainer first.

use std::time::Duration;

use horovod_core::Engine;
use horovod_data::Table;
use horovod_train::{EngineCollectives, ModelSpec, Predictor, TrainConfig, Trainer};
use jni::objects::{JByteArray, JClass, JFloatArray, JIntArray, JString};
use jni::sys::{jboolean, jlong};
use jni::{Env, EnvUnowned};

use crate::error_policy::{JniError, ThrowHorovodException};
use crate::handles::{borrow_mut, free_from_java, into_handle, take};

const ENGINE: &str = "engine";
const TABLE: &str = "table";
const TRAINER: &str = "trainer";
const PREDICTOR: &str = "model";

/// A trainer and how long its collectives may wait.
struct RankTrainer {
    trainer: Trainer,
    timeout: Duration,
}

fn bytes_or_none(env: &mut Env<'_>, array: &JByteArray<'_>) -> Result<Option<Vec<u8>>, JniError> {
    if array.is_null() {
        Ok(None)
    } else {
        Ok(Some(env.convert_byte_array(array)?))
    }
}

/// Consumes the table; every rank calls it (row counts and the initial state are agreed).
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_trainerCreate<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    engine: jlong,
    table: jlong,
    spec: JString<'caller>,
    config: JString<'caller>,
    checkpoint: JByteArray<'caller>,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            // SAFETY: Java hands the table over here and never passes it again.
            let table = unsafe { take::<Table>(table, TABLE)? };
            // SAFETY: Java passes its live engine; the engine outlives this call.
            let engine = unsafe { borrow_mut::<Engine>(engine, ENGINE)? };
            let spec = ModelSpec::from_json(&spec.try_to_string(env)?)?;
            let config = TrainConfig::from_json(&config.try_to_string(env)?)?;
            let checkpoint = bytes_or_none(env, &checkpoint)?;
            let timeout = Duration::from_millis(config.collective_timeout_ms);
            let comm = EngineCollectives::new(engine, timeout);
            let trainer = Trainer::new(spec, config, table, &comm, checkpoint.as_deref())?;
            Ok(into_handle(RankTrainer { trainer, timeout }))
        })
        .resolve::<ThrowHorovodException>()
}

/// Trains one epoch; returns its report as JSON.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_trainerRunEpoch<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    trainer: jlong,
    engine: jlong,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            // SAFETY: Java passes live handles and serialises calls on the trainer.
            let rank = unsafe { borrow_mut::<RankTrainer>(trainer, TRAINER)? };
            let engine = unsafe { borrow_mut::<Engine>(engine, ENGINE)? };
            let report = rank
                .trainer
                .run_epoch(&EngineCollectives::new(engine, rank.timeout))?;
            let json = serde_json::to_string(&report)
                .map_err(|e| JniError::InvalidArgument(e.to_string()))?;
            Ok(JString::from_str(env, json)?)
        })
        .resolve::<ThrowHorovodException>()
}

/// The body of the exports that read something off a trainer.
fn read_trainer<'caller, T: Default>(
    mut unowned_env: EnvUnowned<'caller>,
    trainer: jlong,
    read: impl FnOnce(&mut Env<'caller>, &Trainer) -> Result<T, JniError>,
) -> T {
    unowned_env
        .with_env(|env| -> Result<T, JniError> {
            // SAFETY: Java passes a live trainer handle and serialises calls on it.
            let rank = unsafe { borrow_mut::<RankTrainer>(trainer, TRAINER)? };
            read(env, &rank.trainer)
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_trainerDone<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    trainer: jlong,
) -> jboolean {
    read_trainer(unowned_env, trainer, |_env, t| Ok(t.done()))
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_trainerCheckpoint<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    trainer: jlong,
) -> JByteArray<'caller> {
    read_trainer(unowned_env, trainer, |env, t| {
        Ok(env.byte_array_from_slice(&t.checkpoint())?)
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_trainerModel<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    trainer: jlong,
) -> JByteArray<'caller> {
    read_trainer(unowned_env, trainer, |env, t| {
        Ok(env.byte_array_from_slice(&t.model_bytes())?)
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_trainerHistory<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    trainer: jlong,
) -> JString<'caller> {
    read_trainer(unowned_env, trainer, |env, t| {
        Ok(JString::from_str(env, t.history_json())?)
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_trainerClose<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    trainer: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<RankTrainer>(unowned_env, trainer, TRAINER) }
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_predictorCreate<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    spec: JString<'caller>,
    model: JByteArray<'caller>,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            let spec = ModelSpec::from_json(&spec.try_to_string(env)?)?;
            let model = env.convert_byte_array(&model)?;
            Ok(into_handle(Predictor::new(spec, &model)?))
        })
        .resolve::<ThrowHorovodException>()
}

/// Every output's values for every row of the table, output after output.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_predictorPredict<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    predictor: jlong,
    table: jlong,
) -> JFloatArray<'caller> {
    unowned_env
        .with_env(|env| -> Result<JFloatArray<'caller>, JniError> {
            // SAFETY: Java passes live handles and serialises calls on each.
            let predictor = unsafe { borrow_mut::<Predictor>(predictor, PREDICTOR)? };
            let table = unsafe { borrow_mut::<Table>(table, TABLE)? };
            let outputs = predictor.predict(table)?;
            let values: Vec<f32> = outputs
                .iter()
                .flat_map(|c| c.values().iter().copied())
                .collect();
            let array = env.new_float_array(values.len())?;
            array.set_region(env, 0, &values)?;
            Ok(array)
        })
        .resolve::<ThrowHorovodException>()
}

/// The width of each output, in order.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_predictorOutputWidths<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    predictor: jlong,
) -> JIntArray<'caller> {
    unowned_env
        .with_env(|env| -> Result<JIntArray<'caller>, JniError> {
            // SAFETY: Java passes a live predictor handle and serialises calls on it.
            let predictor = unsafe { borrow_mut::<Predictor>(predictor, PREDICTOR)? };
            let widths: Vec<i32> = predictor.outputs().iter().map(|(_, w)| *w as i32).collect();
            let array = env.new_int_array(widths.len())?;
            array.set_region(env, 0, &widths)?;
            Ok(array)
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_predictorClose<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    predictor: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<Predictor>(unowned_env, predictor, PREDICTOR) }
}

/// `{"inputs": [column, ...], "outputs": [[name, width], ...]}` of a valid spec.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_specDescribe<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    spec: JString<'caller>,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let spec = ModelSpec::from_json(&spec.try_to_string(env)?)?;
            let outputs = spec.outputs(&|_| 1)?;
            let json = serde_json::json!({"inputs": spec.input_columns(), "outputs": outputs});
            Ok(JString::from_str(env, json.to_string())?)
        })
        .resolve::<ThrowHorovodException>()
}
