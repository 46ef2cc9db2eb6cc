//! The training data's `native` methods of `horovod.rs.spark.HorovodNative`:
//! a table of named `f32` columns, filled batch by batch from Arrow buffers
//! the JVM passes by address (docs/ingest.md).
//!
//! A table handle is a `Box<horovod_data::Table>`: the trainer's exports take
//! it (consuming) or borrow it (prediction).

use horovod_data::{append_from_addresses, Column, Table};
use jni::objects::{JClass, JFloatArray, JIntArray, JLongArray, JString};
use jni::sys::{jint, jlong};
use jni::EnvUnowned;

use crate::error_policy::{JniError, ThrowHorovodException};
use crate::exports::count;
use crate::handles::{borrow_mut, free_from_java, into_handle};

const TABLE: &str = "table";

/// An empty table; `names` holds one column name per line, `widths` their values per row.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tableCreate<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    names: JString<'caller>,
    widths: JIntArray<'caller>,
) -> jlong {
    unowned_env
        .with_env(|env| -> Result<jlong, JniError> {
            let names = names.try_to_string(env)?;
            let mut widths_buf = vec![0; widths.len(env)?];
            widths.get_region(env, 0, &mut widths_buf)?;
            let names: Vec<&str> = if names.is_empty() {
                Vec::new()
            } else {
                names.split('\n').collect()
            };
            if names.len() != widths_buf.len() {
                return Err(JniError::InvalidArgument(format!(
                    "{} column names for {} widths",
                    names.len(),
                    widths_buf.len()
                )));
            }
            let columns = names
                .iter()
                .zip(widths_buf)
                .map(|(name, width)| {
                    Ok(Column::new(
                        *name,
                        count(width, "column width")?,
                        Vec::new(),
                    ))
                })
                .collect::<Result<Vec<_>, JniError>>()?;
            let table =
                Table::new(0, columns).map_err(|e| JniError::InvalidArgument(e.to_string()))?;
            Ok(into_handle(table))
        })
        .resolve::<ThrowHorovodException>()
}

/// Copies `rows` rows from one Arrow `float32` data buffer per column.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tableAppend<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    table: jlong,
    addresses: JLongArray<'caller>,
    rows: jint,
) {
    unowned_env
        .with_env(|env| -> Result<(), JniError> {
            // SAFETY: Java passes a live table handle and serialises calls on it.
            let table = unsafe { borrow_mut::<Table>(table, TABLE)? };
            let mut buffers = vec![0; addresses.len(env)?];
            addresses.get_region(env, 0, &mut buffers)?;
            let rows = count(rows, "rows")?;
            // SAFETY: the JVM's Arrow vectors hold `rows * width` floats at these
            // addresses and stay allocated until this call returns.
            unsafe { append_from_addresses(table, &buffers, rows) }
                .map_err(|e| JniError::InvalidArgument(e.to_string()))
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tableRows<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    table: jlong,
) -> jlong {
    unowned_env
        .with_env(|_env| -> Result<jlong, JniError> {
            // SAFETY: Java passes a live table handle and serialises calls on it.
            let table = unsafe { borrow_mut::<Table>(table, TABLE)? };
            Ok(table.rows() as jlong)
        })
        .resolve::<ThrowHorovodException>()
}

/// Every value of column `name`, row after row.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tableColumn<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    table: jlong,
    name: JString<'caller>,
) -> JFloatArray<'caller> {
    unowned_env
        .with_env(|env| -> Result<JFloatArray<'caller>, JniError> {
            // SAFETY: Java passes a live table handle and serialises calls on it.
            let table = unsafe { borrow_mut::<Table>(table, TABLE)? };
            let name = name.try_to_string(env)?;
            let column = table.column(&name).ok_or_else(|| {
                JniError::InvalidArgument(format!("the table has no column '{name}'"))
            })?;
            let array = env.new_float_array(column.values().len())?;
            array.set_region(env, 0, column.values())?;
            Ok(array)
        })
        .resolve::<ThrowHorovodException>()
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tableClose<'caller>(
    unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    table: jlong,
) {
    // SAFETY: Java gives the handle up here and never passes it again.
    unsafe { free_from_java::<Table>(unowned_env, table, TABLE) }
}
