//! JNI entry points of horovod-rs.
//!
//! The JVM reaches the engine only through the static `native` methods of
//! `horovod.rs.spark.HorovodNative`; this crate implements them. It converts
//! arguments, calls `horovod_core`, and turns errors and panics into Java
//! exceptions ([`error_policy`]). It holds no logic of its own.
//!
//! Invariant: no export lets a panic or a Rust error unwind into the JVM; every
//! one goes through `EnvUnowned::with_env(..).resolve::<ThrowHorovodException>()`.

mod arrays;
mod engine_exports;
mod error_policy;
mod exports;
mod handles;
mod settings_exports;
mod table_exports;
mod train_exports;
