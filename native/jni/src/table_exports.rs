//! The training data's `native` methods of `horovod.rs.spark.HorovodNative`:
//! a table of named `f32` columns, filled batch by batch from the JVM's batch
//! buffer, a `float[]` read in place (docs/ingest.md).
//!
//! A table handle is a `Box<horovod_data::Table>`: the trainer's exports take
//! it (consuming) or borrow it (prediction).

use horovod_data::{Column, Table};
use jni::objects::{JClass, JFloatArray, JIntArray, JString, ReleaseMode};
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

/// Copies the first `rows` rows of the JVM's batch buffer: the columns' values one column after
/// another, each in a slot of `capacity_rows * width` values.
#[unsafe(no_mangle)]
pub extern "system" fn Java_horovod_rs_spark_HorovodNative_tableAppendBatch<'caller>(
    mut unowned_env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    table: jlong,
    batch: JFloatArray<'caller>,
    capacity_rows: jint,
    rows: jint,
) {
    unowned_env
        .with_env(|env| -> Result<(), JniError> {
            // SAFETY: Java passes a live table handle and serialises calls on it.
            let table = unsafe { borrow_mut::<Table>(table, TABLE)? };
            let capacity_rows = count(capacity_rows, "capacity rows")?;
            let rows = count(rows, "rows")?;
            // SAFETY: the batch is this call's alone (Java fills it between calls, never during
            // one), and nothing here calls back into the JVM while the elements are held.
            let values = unsafe { batch.get_elements_critical(env, ReleaseMode::NoCopyBack)? };
            table
                .extend_from_batch(&values, capacity_rows, rows)
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
