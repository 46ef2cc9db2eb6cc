//! Java primitive arrays to engine requests and engine outputs back to Java
//! arrays, one generic path for every element type Java has.
//!
//! `byte[]`, `int[]`, `long[]`, `float[]` and `double[]` map to the engine's
//! `i8`, `i32`, `i64`, `f32` and `f64`. Data crosses with one region copy in
//! and one out (no per-element JNI calls), and no Java array stays pinned
//! while the engine works, so the garbage collector is never held up by a
//! slow peer.

use horovod_core::{DataType, Element, Operation, Output, Request};
use jni::objects::{JObject, JPrimitiveArray, TypeArray};
use jni::sys::{jbyte, jdouble, jfloat, jint, jlong, jshort};
use jni::Env;

use crate::error_policy::JniError;

/// A one-dimensional request named `name` running `operation` on the
/// elements of `data`, a `byte[]`, `short[]`, `int[]`, `long[]`, `float[]`
/// or `double[]`.
pub fn request_from_array(
    env: &mut Env<'_>,
    name: String,
    data: &JObject<'_>,
    operation: Operation,
) -> Result<Request, JniError> {
    macro_rules! try_type {
        ($($t:ty),*) => {$(
            if let Ok(array) = env.as_cast::<JPrimitiveArray<$t>>(data) {
                let elements = elements_of::<$t>(env, &array)?;
                let shape = vec![elements.len()];
                return Ok(Request::from_elements(name, operation, shape, &elements));
            }
        )*};
    }
    try_type!(jbyte, jshort, jint, jlong, jfloat, jdouble);
    Err(JniError::InvalidArgument(
        "collectives take byte[], short[], int[], long[], float[] or double[] data".into(),
    ))
}

fn elements_of<T>(env: &mut Env<'_>, array: &JPrimitiveArray<'_, T>) -> Result<Vec<T>, JniError>
where
    T: TypeArray + Element + Default,
{
    let mut elements = vec![T::default(); array.len(env)?];
    array.get_region(env, 0, &mut elements)?;
    Ok(elements)
}

/// A new Java array of the type that carries `dtype`, holding `output`'s
/// elements.
pub fn array_from_output<'local>(
    env: &mut Env<'local>,
    dtype: DataType,
    output: &Output,
) -> Result<JObject<'local>, JniError> {
    match dtype {
        DataType::I8 => new_array::<jbyte>(env, output),
        DataType::I16 => new_array::<jshort>(env, output),
        DataType::I32 => new_array::<jint>(env, output),
        DataType::I64 => new_array::<jlong>(env, output),
        DataType::F32 => new_array::<jfloat>(env, output),
        DataType::F64 => new_array::<jdouble>(env, output),
        other => Err(JniError::InvalidArgument(format!(
            "Java has no array type for {other} results"
        ))),
    }
}

fn new_array<'local, T>(env: &mut Env<'local>, output: &Output) -> Result<JObject<'local>, JniError>
where
    T: TypeArray + Element,
{
    let elements = output.to_elements::<T>().ok_or_else(|| {
        JniError::InvalidArgument(format!(
            "a result of {} bytes is not a whole number of {}",
            output.data.len(),
            T::NAME
        ))
    })?;
    let array = JPrimitiveArray::<T>::new(env, elements.len())?;
    array.set_region(env, 0, &elements)?;
    Ok(array.into())
}
