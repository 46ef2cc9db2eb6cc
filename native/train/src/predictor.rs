//! Inference with a trained model: running statistics, no dropout.

use std::collections::HashMap;

use candle_core::Device;
use horovod_data::{Column, Table};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::blob;
use crate::error::{Error, Result};
use crate::model::{check_categories, Mode, Model};
use crate::spec::ModelSpec;
use crate::threads::products_pool;

/// Rows per forward pass: bounds memory for wide layers.
const BATCH_ROWS: usize = 1024;

/// A trained model, ready to predict.
pub struct Predictor {
    model: Model,
    /// The threads predictions run on (`threads`).
    pool: rayon::ThreadPool,
}

/// The bytes of a saved model: the spec, the column widths and the weights.
pub(crate) fn encode_model(model: &Model, values: &[&[f32]]) -> Vec<u8> {
    let arrays: Vec<(String, &[f32])> = model
        .params()
        .iter()
        .zip(values)
        .map(|(p, v)| (p.name.clone(), *v))
        .collect();
    let meta = serde_json::json!({
        "kind": "horovod-rs model",
        "spec": model.spec().to_json(),
        "column_widths": model.column_widths(),
    });
    blob::encode(meta, &arrays)
}

impl Predictor {
    /// Loads `model_bytes` (from [`crate::Trainer::model_bytes`]) for `spec`.
    pub fn new(spec: ModelSpec, model_bytes: &[u8]) -> Result<Predictor> {
        let (meta, arrays) = blob::decode(model_bytes)?;
        if meta["kind"] != "horovod-rs model" {
            return Err(Error::Checkpoint("not a saved horovod-rs model".into()));
        }
        if meta["spec"].as_str() != Some(spec.to_json().as_str()) {
            return Err(Error::Checkpoint(
                "the saved weights are of a different model spec".into(),
            ));
        }
        let widths: HashMap<String, usize> = serde_json::from_value(meta["column_widths"].clone())
            .map_err(|e| Error::Checkpoint(format!("bad column widths: {e}")))?;
        // The widths come from the file: check them against the values it
        // holds before the model allocates by them.
        let saved: usize = arrays.iter().map(|(_, values)| values.len()).sum();
        let needed = Model::parameter_values(&spec, &widths)?;
        if needed != saved {
            return Err(Error::Checkpoint(format!(
                "the saved model holds {saved} parameter values, its column widths make a model of {needed}"
            )));
        }
        let mut model = Model::new(spec, widths, &mut ChaCha8Rng::seed_from_u64(0))?;
        model.load_params(&arrays)?;
        Ok(Predictor {
            model,
            pool: products_pool("hvd-predict")?,
        })
    }

    /// The outputs' names and widths.
    pub fn outputs(&self) -> Vec<(String, usize)> {
        self.model.outputs()
    }

    /// Trainable and non-trainable (batch norm's running statistics) values,
    /// counted as Keras' model summary counts them, to check a spec by hand.
    pub fn parameter_counts(&self) -> (usize, usize) {
        self.model
            .params()
            .iter()
            .fold((0, 0), |(trainable, fixed), p| {
                if p.trainable {
                    (trainable + p.values.len(), fixed)
                } else {
                    (trainable, fixed + p.values.len())
                }
            })
    }

    /// One column per output, named after it, for every row of `table`.
    pub fn predict(&self, table: &Table) -> Result<Vec<Column>> {
        self.pool.install(|| self.predict_rows(table))
    }

    fn predict_rows(&self, table: &Table) -> Result<Vec<Column>> {
        let inputs = self.model.spec().input_columns();
        for (name, width) in self
            .model
            .column_widths()
            .iter()
            .filter(|(name, _)| inputs.contains(name))
        {
            match table.column(name) {
                Some(c) if c.width() != *width => {
                    return Err(Error::Data(format!(
                        "column '{name}' has {} values per row; the model was trained on {width}",
                        c.width()
                    )))
                }
                None => {
                    let available: Vec<&str> = table.columns().iter().map(|c| c.name()).collect();
                    return Err(Error::Data(format!(
                        "column '{name}' is missing; the data has {available:?}"
                    )));
                }
                _ => {}
            }
        }
        check_categories(self.model.spec(), table)?;
        let device = Device::Cpu;
        let (tensors, _) = self.model.tensors(&device, false)?;
        let outputs = self.model.outputs();
        let mut values: Vec<Vec<f32>> = outputs
            .iter()
            .map(|(_, w)| Vec::with_capacity(table.rows() * w))
            .collect();
        let rows: Vec<usize> = (0..table.rows()).collect();
        for chunk in rows.chunks(BATCH_ROWS) {
            let inputs = self.model.inputs(table, chunk, &device)?;
            let (out, _) = self.model.forward(&tensors, &inputs, Mode::Infer)?;
            for (all, o) in values.iter_mut().zip(out) {
                all.extend(o.flatten_all()?.to_vec1::<f32>()?);
            }
        }
        Ok(outputs
            .into_iter()
            .zip(values)
            .map(|((name, width), v)| Column::new(name, width, v))
            .collect())
    }
}
