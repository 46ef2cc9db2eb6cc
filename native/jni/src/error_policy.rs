//! One place that maps Rust errors and panics to Java exception classes.

use std::any::Any;

use jni::errors::ErrorPolicy;
use jni::strings::JNIString;
use jni::Env;

/// Everything an export can fail with.
#[derive(Debug, thiserror::Error)]
pub enum JniError {
    /// The engine reported an error (rendezvous, collective, timeout, ...).
    #[error(transparent)]
    Core(#[from] horovod_core::Error),
    /// A JNI call failed (a pending Java exception, a bad array, ...).
    #[error("jni: {0}")]
    Jni(#[from] jni::errors::Error),
    /// Java passed an argument the engine cannot use (a closed handle, a bad op).
    #[error("{0}")]
    InvalidArgument(String),
    /// A Spark conf key or Horovod variable has a value the table of
    /// settings refuses: the caller's mistake, as Java's own argument checks.
    #[error(transparent)]
    Setting(horovod_core::Error),
    /// The trainer rejected a spec, config or data, or failed while training.
    #[error(transparent)]
    Train(horovod_train::Error),
}

impl From<horovod_train::Error> for JniError {
    /// A collective's failure inside the trainer keeps its own exception class
    /// (a lost peer, a timeout); the trainer's own errors are plain ones.
    fn from(error: horovod_train::Error) -> JniError {
        match error {
            horovod_train::Error::Collective(core) => JniError::Core(core),
            other => JniError::Train(other),
        }
    }
}

const BASE_EXCEPTION: &str = "horovod/rs/spark/HorovodException";
const PEER_LOST_EXCEPTION: &str = "horovod/rs/spark/HorovodPeerLostException";
const TIMEOUT_EXCEPTION: &str = "horovod/rs/spark/HorovodTimeoutException";
const ARGUMENT_EXCEPTION: &str = "java/lang/IllegalArgumentException";

impl JniError {
    fn java_class(&self) -> &'static str {
        match self {
            JniError::Core(e) if e.is_peer_lost() => PEER_LOST_EXCEPTION,
            // An engine stops when some rank's stops (its function returned or threw) or its
            // transport fails: a consequence of another rank, like a lost peer.
            JniError::Core(horovod_core::Error::EngineStopped { .. }) => PEER_LOST_EXCEPTION,
            JniError::Core(horovod_core::Error::Timeout { .. }) => TIMEOUT_EXCEPTION,
            JniError::Setting(_) => ARGUMENT_EXCEPTION,
            _ => BASE_EXCEPTION,
        }
    }
}

/// Throws a `HorovodException` (or a subclass that says what kind of failure it
/// was) carrying the Rust error chain; the export then returns a default value
/// that Java never sees because the exception is pending.
#[derive(Debug, Default)]
pub struct ThrowHorovodException;

impl<T: Default> ErrorPolicy<T, JniError> for ThrowHorovodException {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        err: JniError,
    ) -> jni::errors::Result<T> {
        if env.exception_check() {
            // A Java exception is already pending (e.g. from a failed JNI call): it wins.
            return Ok(T::default());
        }
        let _ = env.throw_new(
            JNIString::new(err.java_class()),
            JNIString::new(error_chain(&err)),
        );
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        payload: Box<dyn Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let what = panic_message(payload);
        let _ = env.throw_new(
            JNIString::new(BASE_EXCEPTION),
            JNIString::new(format!("native panic (a bug in horovod-rs): {what}")),
        );
        Ok(T::default())
    }
}

/// "outer: inner: innermost", so the Java message keeps every layer's context.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

fn panic_message(payload: Box<dyn Any + Send + 'static>) -> String {
    match payload.downcast::<&'static str>() {
        Ok(s) => (*s).to_string(),
        Err(payload) => match payload.downcast::<String>() {
            Ok(s) => *s,
            // Dropping an unknown payload could itself panic; leak it instead.
            Err(payload) => {
                std::mem::forget(payload);
                "non-string panic payload".to_string()
            }
        },
    }
}
