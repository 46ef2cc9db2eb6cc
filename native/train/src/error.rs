//! What can go wrong while building, training or running a model.

use thiserror::Error;

/// The trainer's errors: short, lowercase, naming what was wrong.
#[derive(Debug, Error)]
pub enum Error {
    /// The model spec is not valid JSON or not a valid model.
    #[error("model spec: {0}")]
    Spec(String),
    /// The training config is not valid.
    #[error("training config: {0}")]
    Config(String),
    /// The data does not fit the model: missing column, wrong width, bad values.
    #[error("data: {0}")]
    Data(String),
    /// A checkpoint or saved model cannot be read.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A tensor operation failed (a shape the spec checks should have caught).
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A collective returned something other than what every rank sent
    /// (another length): the ranks do not run the same model.
    #[error("collective: {0}")]
    Exchange(String),
    /// The threads a trainer or predictor runs the model on could not be started.
    #[error("starting the threads that run the model: {0}")]
    Threads(#[from] rayon::ThreadPoolBuildError),
    /// A collective with the other ranks failed.
    #[error(transparent)]
    Collective(#[from] horovod_core::Error),
}

/// The trainer's result type.
pub type Result<T> = std::result::Result<T, Error>;
