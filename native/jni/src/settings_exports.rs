//! The `native` methods of `horovod.rs.spark.HorovodNative` that read a
//! job's settings and the words of failures, for the JVM driver:
//! native/core's `launch::settings` and `launch::failure`.
//!
//! Each export: convert arguments, call `horovod_core`, convert the result.
//! Maps and results cross as JSON strings.

use std::collections::HashMap;

use horovod_core::launch::{failure, job_settings, settings};
use jni::objects::{JClass, JString};
use jni::sys::jboolean;
use jni::{Env, EnvUnowned};

use crate::error_policy::{JniError, ThrowHorovodException};

/// Every setting as `[{"key", "variable", "default", "doc"}]` (`variable`
/// null where Horovod has none), in the table's order.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_settingTable<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let rows: Vec<_> = settings::SETTINGS
                .iter()
                .map(|setting| {
                    serde_json::json!({
                        "key": setting.key,
                        "variable": setting.variable.as_ref().map(|variable| variable.name),
                        "default": setting.default_text(),
                        "doc": setting.doc,
                    })
                })
                .collect();
            Ok(JString::from_str(
                env,
                serde_json::Value::from(rows).to_string(),
            )?)
        })
        .resolve::<ThrowHorovodException>()
}

/// The job's settings from `keys` (Spark conf keys) and `variables`
/// (Horovod's), each a JSON object of strings, as
/// `{"spec": {...}, "driver": {...}}`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_jobSettings<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    keys: JString<'caller>,
    variables: JString<'caller>,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let keys = string_map(env, &keys, "keys")?;
            let variables = string_map(env, &variables, "variables")?;
            let settings = job_settings(
                |key| keys.get(key).cloned(),
                |name| variables.get(name).cloned(),
            )
            .map_err(JniError::Setting)?;
            let json = serde_json::to_string(&settings)
                .map_err(|e| JniError::InvalidArgument(e.to_string()))?;
            Ok(JString::from_str(env, json)?)
        })
        .resolve::<ThrowHorovodException>()
}

/// The rank-spec fields in `fields` (JSON) with every default filled.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_specWithDefaults<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    fields: JString<'caller>,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let fields: serde_json::Value = serde_json::from_str(&fields.try_to_string(env)?)
                .map_err(|e| JniError::InvalidArgument(format!("spec fields: {e}")))?;
            let filled = settings::spec_with_defaults(&fields).map_err(JniError::Setting)?;
            Ok(JString::from_str(env, filled.to_string())?)
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_rankLost<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    text: JString<'caller>,
) -> jboolean {
    unowned_env
        .with_env(|env| -> Result<jboolean, JniError> {
            Ok(failure::rank_lost(&text.try_to_string(env)?))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_followsPeer<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    text: JString<'caller>,
) -> jboolean {
    unowned_env
        .with_env(|env| -> Result<jboolean, JniError> {
            Ok(failure::follows_peer(&text.try_to_string(env)?))
        })
        .resolve::<ThrowHorovodException>()
}

/// Why a rank leaves its job now: its function returned (`error` null) or
/// failed with `error`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_departure<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    error: JString<'caller>,
) -> JString<'caller> {
    unowned_env
        .with_env(|env| -> Result<JString<'caller>, JniError> {
            let error = if error.is_null() {
                None
            } else {
                Some(error.try_to_string(env)?)
            };
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs());
            Ok(JString::from_str(
                env,
                failure::departure(error.as_deref(), now),
            )?)
        })
        .resolve::<ThrowHorovodException>()
}

/// A JSON object of strings from Java.
fn string_map(
    env: &mut Env<'_>,
    json: &JString<'_>,
    what: &str,
) -> Result<HashMap<String, String>, JniError> {
    serde_json::from_str(&json.try_to_string(env)?).map_err(|e| {
        JniError::InvalidArgument(format!("{what}: expected a JSON object of strings: {e}"))
    })
}
