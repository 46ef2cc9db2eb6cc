//! horovod-train: the native trainer of horovod-rs.
//!
//! A [`ModelSpec`] (JSON: inputs read from table columns, layers, outputs)
//! becomes a model on candle tensors; a [`Trainer`] fits it on one rank's
//! [`horovod_data::Table`], data parallel: rank 0's initial state goes to
//! every rank, each step's gradients are summed across ranks through
//! [`Collectives`] (the collective engine in a Spark job), and every rank
//! applies the same update, so all end with the same weights. A [`Predictor`]
//! runs a trained model. docs/model-spec.md documents the JSON formats.
//!
//! Modules, one job each: `spec` (the model's JSON and its checks), `model`
//! (parameters and the forward pass), `bias` (a dense layer's bias add), `loss` (losses and metrics), `optim`
//! (SGD, Adam, AdamW), `config` (the training config), `shuffle` (the shuffle
//! buffer), `collectives` (what the trainer needs from other ranks), `blob`
//! (checkpoint and model bytes), `threads` (the pool candle's products split
//! over), `trainer`, `predictor`.

#![warn(missing_docs)]

mod bias;
mod blob;
mod collectives;
mod config;
mod error;
mod loss;
mod model;
mod optim;
mod predictor;
mod shuffle;
mod spec;
mod threads;
mod trainer;

pub use collectives::{Collectives, EngineCollectives, Single};
pub use config::TrainConfig;
pub use error::{Error, Result};
pub use loss::{Loss, Metric};
pub use optim::OptimizerConfig;
pub use predictor::Predictor;
pub use spec::ModelSpec;
pub use trainer::{EpochReport, Trainer};
