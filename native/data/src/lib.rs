//! horovod-data: a rank's training data as a columnar [`Table`] of `f32`.
//!
//! Every column the trainer reads (features, labels, a validation flag) is held
//! as `f32`, row after row, `width` values per row: a scalar column has width 1,
//! a fixed-length array or a Spark ML vector of size n has width n. Categorical
//! columns are integer indices stored as `f32` too (exact up to 2^24), which keeps
//! one element type from the JVM to the model's first layer.

#![warn(missing_docs)]

mod table;

pub use table::{Column, Table, TableError};
