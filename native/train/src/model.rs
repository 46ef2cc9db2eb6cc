//! A model built from its spec: parameters as plain `f32` vectors (what the
//! optimizer, the collectives and checkpoints work on) and a forward pass on
//! candle tensors (what autodiff works on).

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::bias::add_bias;
use crate::error::{Error, Result};
use crate::spec::{Activation, InputType, Layer, ModelSpec, Node};

/// One parameter: trainable weights, or batch norm's running statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// `<layer>/<kind>`, e.g. `hidden/kernel`.
    pub name: String,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub values: Vec<f32>,
    /// Whether gradients update it (running statistics are not).
    pub trainable: bool,
}

/// Whether a forward pass trains (batch statistics, dropout) or infers.
pub enum Mode<'a> {
    /// Training: dropout masks come from this generator.
    Train(&'a mut ChaCha8Rng),
    /// Inference: running statistics, no dropout.
    Infer,
}

/// What a training forward pass produced besides the outputs: each batch
/// norm's batch mean and variance, to update its running statistics.
pub struct BatchStats {
    /// (index of the moving mean param, batch mean, momentum); the moving variance is the next param.
    pub updates: Vec<(usize, Tensor, Tensor, f64)>,
}

/// The model: its checked layers and parameters.
#[derive(Debug, Clone)]
pub struct Model {
    spec: ModelSpec,
    nodes: Vec<Node>,
    column_widths: HashMap<String, usize>,
    params: Vec<Param>,
    index: HashMap<String, usize>,
}

impl Model {
    /// A model with Keras' initialisation, seeded: Glorot uniform kernels,
    /// zero biases, uniform(-0.05, 0.05) embeddings, batch norm at identity.
    pub fn new(
        spec: ModelSpec,
        column_widths: HashMap<String, usize>,
        rng: &mut ChaCha8Rng,
    ) -> Result<Model> {
        // Also checks that no product below overflows.
        Model::parameter_values(&spec, &column_widths)?;
        let widths = column_widths.clone();
        let nodes = spec.plan_with(&|c| widths.get(c).copied().unwrap_or(1))?;
        let shapes = shapes_by_name(&spec, &nodes, &column_widths);
        let vocab = vocabularies(&spec);
        let mut params = Vec::new();
        for node in &nodes {
            let input_width: usize = shapes[&node.reads[0]].iter().product();
            match &node.layer {
                Layer::Dense { units, .. } => {
                    let limit = (6.0 / (input_width as f64 + *units as f64)).sqrt();
                    params.push(param(
                        &node.name,
                        "kernel",
                        vec![input_width, *units],
                        uniform(rng, input_width * units, limit),
                        true,
                    ));
                    params.push(param(
                        &node.name,
                        "bias",
                        vec![*units],
                        vec![0.0; *units],
                        true,
                    ));
                }
                Layer::Embedding { dim } => {
                    let v = vocab[node.reads[0].as_str()];
                    params.push(param(
                        &node.name,
                        "embeddings",
                        vec![v, *dim],
                        uniform(rng, v * dim, 0.05),
                        true,
                    ));
                }
                Layer::BatchNorm { .. } => {
                    let n = input_width;
                    params.push(param(&node.name, "gamma", vec![n], vec![1.0; n], true));
                    params.push(param(&node.name, "beta", vec![n], vec![0.0; n], true));
                    params.push(param(
                        &node.name,
                        "moving_mean",
                        vec![n],
                        vec![0.0; n],
                        false,
                    ));
                    params.push(param(
                        &node.name,
                        "moving_variance",
                        vec![n],
                        vec![1.0; n],
                        false,
                    ));
                }
                _ => {}
            }
        }
        let index = params
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
        Ok(Model {
            spec,
            nodes,
            column_widths,
            params,
            index,
        })
    }

    /// How many parameter values the model of `spec` has for these column
    /// widths, counted without allocating them (a saved model's widths are
    /// checked against the values it holds before any is allocated).
    pub fn parameter_values(
        spec: &ModelSpec,
        column_widths: &HashMap<String, usize>,
    ) -> Result<usize> {
        let nodes = spec.plan_with(&|c| column_widths.get(c).copied().unwrap_or(1))?;
        let shapes = shapes_by_name(spec, &nodes, column_widths);
        let vocab = vocabularies(spec);
        nodes.iter().try_fold(0usize, |total, node| {
            // The plan checked that every shape's product fits.
            let input_width: usize = shapes[&node.reads[0]].iter().product();
            let values = match &node.layer {
                Layer::Dense { units, .. } => input_width
                    .checked_mul(*units)
                    .and_then(|kernel| kernel.checked_add(*units)),
                Layer::Embedding { dim } => vocab[node.reads[0].as_str()].checked_mul(*dim),
                Layer::BatchNorm { .. } => input_width.checked_mul(4),
                _ => Some(0),
            };
            values
                .and_then(|values| total.checked_add(values))
                .ok_or_else(|| {
                    Error::Spec(format!(
                        "layer '{}': the model has more parameter values than fit in memory",
                        node.name
                    ))
                })
        })
    }

    /// The spec.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// Table column widths the model was built for.
    pub fn column_widths(&self) -> &HashMap<String, usize> {
        &self.column_widths
    }

    /// Every parameter, in a fixed order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// Every parameter, to update.
    pub fn params_mut(&mut self) -> &mut [Param] {
        &mut self.params
    }

    /// Replaces every parameter's values, checking names and sizes.
    pub fn load_params(&mut self, loaded: &[(String, Vec<f32>)]) -> Result<()> {
        if loaded.len() != self.params.len() {
            return Err(Error::Checkpoint(format!(
                "{} parameters saved, the model has {}",
                loaded.len(),
                self.params.len()
            )));
        }
        for (name, values) in loaded {
            let i = *self
                .index
                .get(name)
                .ok_or_else(|| Error::Checkpoint(format!("unknown parameter '{name}'")))?;
            if self.params[i].values.len() != values.len() {
                return Err(Error::Checkpoint(format!(
                    "parameter '{name}' has {} values saved, the model has {}",
                    values.len(),
                    self.params[i].values.len()
                )));
            }
            self.params[i].values.clone_from(values);
        }
        Ok(())
    }

    /// The sum of `l2 * sum(kernel^2)` over regularised dense layers, on the given tensors.
    pub fn l2_penalty(&self, tensors: &[Tensor]) -> Result<Option<Tensor>> {
        let mut total: Option<Tensor> = None;
        for node in &self.nodes {
            if let Layer::Dense { l2, .. } = node.layer {
                if l2 > 0.0 {
                    let kernel = &tensors[self.index[&format!("{}/kernel", node.name)]];
                    let term = (kernel.sqr()?.sum_all()? * l2)?;
                    total = Some(match total {
                        Some(t) => (t + term)?,
                        None => term,
                    });
                }
            }
        }
        Ok(total)
    }

    /// Parameter tensors for a forward pass; trainable ones as `Var`s when
    /// `track` is set, so their gradients can be read after `backward`.
    pub fn tensors(&self, device: &Device, track: bool) -> Result<(Vec<Tensor>, Vec<Option<Var>>)> {
        let mut tensors = Vec::with_capacity(self.params.len());
        let mut vars = Vec::with_capacity(self.params.len());
        for p in &self.params {
            if track && p.trainable {
                // Straight into a Var: Var::from_tensor would copy the values a second time.
                let var = Var::from_slice(&p.values, p.shape.as_slice(), device)?;
                tensors.push(var.as_tensor().clone());
                vars.push(Some(var));
            } else {
                tensors.push(Tensor::from_slice(&p.values, p.shape.as_slice(), device)?);
                vars.push(None);
            }
        }
        Ok((tensors, vars))
    }

    /// Runs the model on `inputs` (one `(batch, width)` tensor per spec input,
    /// by name); returns the outputs in spec order and, when training, the
    /// batch statistics of every batch norm.
    pub fn forward(
        &self,
        tensors: &[Tensor],
        inputs: &HashMap<String, Tensor>,
        mut mode: Mode<'_>,
    ) -> Result<(Vec<Tensor>, BatchStats)> {
        let mut values: HashMap<&str, Tensor> = inputs
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let mut stats = BatchStats {
            updates: Vec::new(),
        };
        for node in &self.nodes {
            let x = &values[node.reads[0].as_str()];
            let batch = x.dim(0)?;
            let p = |kind: &str| &tensors[self.index[&format!("{}/{kind}", node.name)]];
            let y = match &node.layer {
                Layer::Dense { activation, .. } => {
                    activate(&add_bias(&x.matmul(p("kernel"))?, p("bias"))?, *activation)?
                }
                Layer::Embedding { .. } => {
                    let ids = x.flatten_all()?.to_dtype(DType::U32)?;
                    p("embeddings")
                        .index_select(&ids, 0)?
                        .reshape((batch, node.shape[0]))?
                }
                Layer::BatchNorm { momentum, epsilon } => match mode {
                    Mode::Train(_) => {
                        let mean = x.mean_keepdim(0)?;
                        let centered = x.broadcast_sub(&mean)?;
                        let variance = centered.sqr()?.mean_keepdim(0)?;
                        let normed =
                            centered.broadcast_div(&(variance.clone() + *epsilon)?.sqrt()?)?;
                        let moving = self.index[&format!("{}/moving_mean", node.name)];
                        stats.updates.push((
                            moving,
                            mean.squeeze(0)?.detach(),
                            variance.squeeze(0)?.detach(),
                            *momentum,
                        ));
                        normed.broadcast_mul(p("gamma"))?.broadcast_add(p("beta"))?
                    }
                    Mode::Infer => {
                        let normed = x
                            .broadcast_sub(p("moving_mean"))?
                            .broadcast_div(&(p("moving_variance").clone() + *epsilon)?.sqrt()?)?;
                        normed.broadcast_mul(p("gamma"))?.broadcast_add(p("beta"))?
                    }
                },
                Layer::Dropout { rate } => match &mut mode {
                    Mode::Train(rng) if *rate > 0.0 => {
                        let keep = 1.0 - rate;
                        let scale = (1.0 / keep) as f32;
                        let mask: Vec<f32> = (0..x.elem_count())
                            .map(|_| if rng.gen::<f64>() < keep { scale } else { 0.0 })
                            .collect();
                        x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?)?
                    }
                    _ => x.clone(),
                },
                Layer::Concatenate => {
                    let parts: Vec<&Tensor> =
                        node.reads.iter().map(|r| &values[r.as_str()]).collect();
                    Tensor::cat(&parts, 1)?
                }
                Layer::Flatten => x.reshape((batch, node.shape[0]))?,
                Layer::Reshape { shape } => {
                    let mut dims = vec![batch];
                    dims.extend_from_slice(shape);
                    x.reshape(dims)?
                }
                Layer::Activation(activation) => activate(x, *activation)?,
            };
            values.insert(node.name.as_str(), y);
        }
        let outputs = self
            .spec
            .outputs
            .iter()
            .map(|o| {
                let t = &values[o.as_str()];
                let batch = t.dim(0)?;
                Ok(t.reshape((batch, t.elem_count() / batch.max(1)))?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((outputs, stats))
    }

    /// Builds the input tensors for `rows` of the table's columns.
    pub fn inputs(
        &self,
        table: &horovod_data::Table,
        rows: &[usize],
        device: &Device,
    ) -> Result<HashMap<String, Tensor>> {
        let mut inputs = HashMap::new();
        for input in &self.spec.inputs {
            let columns: Vec<&horovod_data::Column> = input
                .column_names()
                .iter()
                .map(|c| {
                    table
                        .column(c)
                        .ok_or_else(|| Error::Data(format!("column '{c}' is missing")))
                })
                .collect::<Result<_>>()?;
            let width: usize = columns.iter().map(|c| c.width()).sum();
            let mut values = Vec::with_capacity(rows.len() * width);
            for &row in rows {
                for column in &columns {
                    values.extend_from_slice(column.row(row));
                }
            }
            let tensor = Tensor::from_vec(values, (rows.len(), width), device)?;
            inputs.insert(input.name.clone(), tensor);
        }
        Ok(inputs)
    }

    /// The outputs' names and widths.
    pub fn outputs(&self) -> Vec<(String, usize)> {
        let shapes = shapes_by_name(&self.spec, &self.nodes, &self.column_widths);
        self.spec
            .outputs
            .iter()
            .map(|o| (o.clone(), shapes[o].iter().product()))
            .collect()
    }
}

/// Categorical columns must hold integer indices in `[0, vocabulary)`: an
/// index past the table would fail inside the embedding's gather, and a
/// negative or fractional one would be truncated to another category.
pub fn check_categories(spec: &ModelSpec, data: &horovod_data::Table) -> Result<()> {
    for input in spec
        .inputs
        .iter()
        .filter(|i| i.kind == InputType::Categorical)
    {
        let vocabulary = input.vocabulary.unwrap_or(0);
        for name in input.column_names() {
            let Some(column) = data.column(&name) else {
                return Err(Error::Data(format!("column '{name}' is missing")));
            };
            let bad = column
                .values()
                .iter()
                .filter(|&&v| !(v >= 0.0 && v.fract() == 0.0 && (v as usize) < vocabulary))
                .count();
            if bad > 0 {
                return Err(Error::Data(format!(
                    "categorical column '{name}' has {bad} values that are not integers in [0, {vocabulary})"
                )));
            }
        }
    }
    Ok(())
}

/// Each categorical input's vocabulary, by name.
fn vocabularies(spec: &ModelSpec) -> HashMap<&str, usize> {
    spec.inputs
        .iter()
        .filter_map(|i| i.vocabulary.map(|v| (i.name.as_str(), v)))
        .collect()
}

fn shapes_by_name(
    spec: &ModelSpec,
    nodes: &[Node],
    widths: &HashMap<String, usize>,
) -> HashMap<String, Vec<usize>> {
    let mut shapes = HashMap::new();
    for input in &spec.inputs {
        let width = input
            .column_names()
            .iter()
            .map(|c| widths.get(c).copied().unwrap_or(1))
            .sum();
        shapes.insert(input.name.clone(), vec![width]);
    }
    for node in nodes {
        shapes.insert(node.name.clone(), node.shape.clone());
    }
    shapes
}

fn param(layer: &str, kind: &str, shape: Vec<usize>, values: Vec<f32>, trainable: bool) -> Param {
    Param {
        name: format!("{layer}/{kind}"),
        shape,
        values,
        trainable,
    }
}

fn uniform(rng: &mut ChaCha8Rng, n: usize, limit: f64) -> Vec<f32> {
    (0..n)
        .map(|_| rng.gen_range(-limit..limit) as f32)
        .collect()
}

/// Applies an activation.
pub fn activate(x: &Tensor, activation: Activation) -> Result<Tensor> {
    Ok(match activation {
        Activation::Linear => x.clone(),
        Activation::Relu => x.relu()?,
        Activation::Tanh => x.tanh()?,
        Activation::Sigmoid => sigmoid(x)?,
        Activation::ScaledSigmoid(scale) => (sigmoid(x)? * scale)?,
        Activation::Softmax => {
            let shifted = x.broadcast_sub(&x.max_keepdim(1)?.detach())?;
            let e = shifted.exp()?;
            e.broadcast_div(&e.sum_keepdim(1)?)?
        }
    })
}

/// sigmoid(x) = (tanh(x / 2) + 1) / 2. Written through tanh because
/// 1 / (1 + e^-x) overflows e^-x for x below about -88, and its gradient
/// then becomes 0 * inf = NaN; tanh saturates with a finite gradient.
fn sigmoid(x: &Tensor) -> Result<Tensor> {
    Ok(x.affine(0.5, 0.0)?.tanh()?.affine(0.5, 0.5)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturated_sigmoid_has_finite_values_and_gradients() {
        let x = Var::from_slice(&[-200.0f32, -1.0, 0.0, 2.0, 200.0], 5, &Device::Cpu).unwrap();
        let y = sigmoid(x.as_tensor()).unwrap();
        let values = y.to_vec1::<f32>().unwrap();
        for (v, x) in values.iter().zip([-200.0f32, -1.0, 0.0, 2.0, 200.0]) {
            assert!(
                (v - 1.0 / (1.0 + (-x).exp())).abs() < 1e-6,
                "sigmoid({x}) = {v}"
            );
        }
        let grads = y.sum_all().unwrap().backward().unwrap();
        let g = grads.get(x.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        // d sigmoid / dx = s (1 - s): 0 at both ends, 0.25 at 0.
        assert!(g.iter().all(|g| g.is_finite()), "{g:?}");
        assert!((g[2] - 0.25).abs() < 1e-6 && g[0].abs() < 1e-6 && g[4].abs() < 1e-6);
    }
}
