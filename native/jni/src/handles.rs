//! Native objects owned by Java through opaque `long` handles.
//!
//! A handle is a `Box` turned into a raw pointer. Java owns it: the Java wrapper
//! (`NativeListener`, `NativeEngine`) serialises calls on one handle and calls the matching
//! `close` exactly once, after which it never passes the handle again.

use jni::EnvUnowned;

use crate::error_policy::{JniError, ThrowHorovodException};

/// Moves `value` to the heap and returns its handle.
pub fn into_handle<T>(value: T) -> i64 {
    Box::into_raw(Box::new(value)) as i64
}

/// Borrows the object behind `handle`.
///
/// # Safety
/// `handle` must come from [`into_handle`] with the same `T`, must not have been
/// passed to [`take`] yet, and no other call may use it at the same time.
pub unsafe fn borrow_mut<'a, T>(handle: i64, what: &str) -> Result<&'a mut T, JniError> {
    if handle == 0 {
        return Err(JniError::InvalidArgument(format!("{what} is closed")));
    }
    // SAFETY: the caller guarantees the handle is live and unshared.
    Ok(unsafe { &mut *(handle as *mut T) })
}

/// Takes back ownership of the object behind `handle`; dropping it frees it.
///
/// # Safety
/// As for [`borrow_mut`]; afterwards the handle must never be used again.
pub unsafe fn take<T>(handle: i64, what: &str) -> Result<T, JniError> {
    if handle == 0 {
        return Err(JniError::InvalidArgument(format!("{what} is closed")));
    }
    // SAFETY: the caller guarantees the handle is live and is given up here.
    Ok(*unsafe { Box::from_raw(handle as *mut T) })
}

/// The whole body of a `close`-style export: frees the object behind
/// `handle`, throwing a Java exception if the handle is already closed.
///
/// # Safety
/// As for [`take`]: Java gives `handle` up with this call.
pub unsafe fn free_from_java<T>(mut unowned_env: EnvUnowned<'_>, handle: i64, what: &str) {
    unowned_env
        .with_env(|_env| -> Result<(), JniError> {
            // SAFETY: the caller gives the handle up, as this function's contract says.
            drop(unsafe { take::<T>(handle, what)? });
            Ok(())
        })
        .resolve::<ThrowHorovodException>()
}
