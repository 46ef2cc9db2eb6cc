//! The training config: what the estimator's params become on each rank.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::optim::OptimizerConfig;

/// How to train, as JSON (docs/model-spec.md lists keys and defaults).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Label columns, one per model output, in output order.
    pub label_columns: Vec<String>,
    /// Training rows per step on each rank.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Validation rows per step; defaults to `batch_size`.
    #[serde(default)]
    pub val_batch_size: Option<usize>,
    /// Passes over the training rows.
    #[serde(default = "default_epochs")]
    pub epochs: usize,
    /// Steps per epoch on every rank; defaults to the rows over ranks times batch size.
    #[serde(default)]
    pub steps_per_epoch: Option<usize>,
    /// The optimizer.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// The loss.
    #[serde(default = "default_loss")]
    pub loss: String,
    /// Metrics reported per epoch besides the loss.
    #[serde(default)]
    pub metrics: Vec<String>,
    /// A column whose nonzero rows are validation rows.
    #[serde(default)]
    pub validation_column: Option<String>,
    /// A fraction of each rank's rows, drawn with the seed, for validation.
    #[serde(default)]
    pub validation_fraction: Option<f64>,
    /// The metric that picks the best epoch: `val_loss` with validation, else `loss`.
    #[serde(default)]
    pub monitor: Option<String>,
    /// Stop after this many epochs without improvement of the monitored metric.
    #[serde(default)]
    pub early_stopping_patience: Option<usize>,
    /// Rows in each rank's shuffle buffer.
    #[serde(default = "default_shuffle_buffer_size")]
    pub shuffle_buffer_size: usize,
    /// Seed of initialisation, dropout, shuffling and the validation split.
    #[serde(default)]
    pub seed: u64,
    /// How long a collective may wait for the other ranks.
    #[serde(default = "default_collective_timeout_ms")]
    pub collective_timeout_ms: u64,
}

fn default_batch_size() -> usize {
    32
}
fn default_epochs() -> usize {
    1
}
fn default_loss() -> String {
    "mse".into()
}
fn default_shuffle_buffer_size() -> usize {
    10_000
}
fn default_collective_timeout_ms() -> u64 {
    600_000
}

impl TrainConfig {
    /// Parses and checks a config.
    pub fn from_json(json: &str) -> Result<TrainConfig> {
        let config: TrainConfig =
            serde_json::from_str(json).map_err(|e| Error::Config(e.to_string()))?;
        if config.label_columns.is_empty() {
            return Err(Error::Config(
                "label_columns is empty: name one label column per model output".into(),
            ));
        }
        if config.batch_size == 0 || config.val_batch_size == Some(0) {
            return Err(Error::Config("batch sizes must be at least 1".into()));
        }
        if config.steps_per_epoch == Some(0) {
            return Err(Error::Config("steps_per_epoch must be at least 1".into()));
        }
        if let Some(f) = config.validation_fraction {
            if !(f > 0.0 && f < 1.0) {
                return Err(Error::Config(format!(
                    "validation_fraction must be in (0, 1), got {f}"
                )));
            }
        }
        if config.validation_column.is_some() && config.validation_fraction.is_some() {
            return Err(Error::Config(
                "give validation_column or validation_fraction, not both".into(),
            ));
        }
        Ok(config)
    }

    /// Whether some rows are held out for validation.
    pub fn has_validation(&self) -> bool {
        self.validation_column.is_some() || self.validation_fraction.is_some()
    }
}
