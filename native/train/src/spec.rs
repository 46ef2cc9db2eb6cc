//! The model spec: named inputs read from table columns, layers each reading
//! earlier names, and outputs. docs/model-spec.md documents the JSON.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A whole model, as the JSON describes it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Inputs, each read from one or more table columns.
    pub inputs: Vec<InputSpec>,
    /// Layers, in an order where each reads only names defined before it.
    #[serde(default)]
    pub layers: Vec<LayerSpec>,
    /// Names of the layers (or inputs) that are the model's outputs.
    pub outputs: Vec<String>,
}

/// How an input reads its columns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InputType {
    /// Float features, the columns side by side.
    Float,
    /// Integer category indices in `[0, vocabulary)`, one per column.
    Categorical,
}

/// One named input.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// The input's name, for layers to read.
    pub name: String,
    /// Float or categorical.
    #[serde(rename = "type")]
    pub kind: InputType,
    /// Table columns, concatenated; defaults to the input's name.
    #[serde(default)]
    pub columns: Vec<String>,
    /// Categories of a categorical input.
    #[serde(default)]
    pub vocabulary: Option<usize>,
}

impl InputSpec {
    /// The columns this input reads.
    pub fn column_names(&self) -> Vec<String> {
        if self.columns.is_empty() {
            vec![self.name.clone()]
        } else {
            self.columns.clone()
        }
    }
}

/// An activation function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// Identity.
    Linear,
    /// max(x, 0).
    Relu,
    /// tanh(x).
    Tanh,
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// e^x / sum(e^x) over the last dimension.
    Softmax,
    /// scale * sigmoid(x).
    ScaledSigmoid(f64),
}

impl Activation {
    fn parse(name: &str, scale: Option<f64>, layer: &str) -> Result<Activation> {
        Ok(match name {
            "linear" => Activation::Linear,
            "relu" => Activation::Relu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            "softmax" => Activation::Softmax,
            "scaled_sigmoid" => match scale {
                Some(scale) if scale.is_finite() => Activation::ScaledSigmoid(scale),
                _ => return Err(spec_error(layer, "scaled_sigmoid needs a finite \"scale\"")),
            },
            other => {
                return Err(spec_error(
                    layer,
                    &format!("unknown activation '{other}' (linear, relu, tanh, sigmoid, softmax, scaled_sigmoid)"),
                ))
            }
        })
    }
}

/// One layer, as the JSON writes it: a type and that type's fields.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    /// The layer's name, for later layers and outputs to read.
    pub name: String,
    /// dense, embedding, batch_norm, dropout, concatenate, flatten, reshape or activation.
    #[serde(rename = "type")]
    pub kind: String,
    /// The name this layer reads (all but concatenate).
    #[serde(default)]
    pub input: Option<String>,
    /// The names concatenate reads.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Dense: output width.
    #[serde(default)]
    pub units: Option<usize>,
    /// Dense or activation: the function.
    #[serde(default)]
    pub activation: Option<String>,
    /// scaled_sigmoid's factor.
    #[serde(default)]
    pub scale: Option<f64>,
    /// Dense: L2 penalty on the kernel.
    #[serde(default)]
    pub l2: Option<f64>,
    /// Embedding: vector width.
    #[serde(default)]
    pub dim: Option<usize>,
    /// Dropout: the fraction dropped while training.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Batch norm: running statistics' momentum (Keras: 0.99).
    #[serde(default)]
    pub momentum: Option<f64>,
    /// Batch norm: added to the variance (Keras: 0.001).
    #[serde(default)]
    pub epsilon: Option<f64>,
    /// Reshape: dimensions after the batch.
    #[serde(default)]
    pub shape: Vec<usize>,
}

/// A layer checked against the spec: what it computes and what it reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Layer {
    /// x W + b, then an activation.
    Dense {
        /// Output width.
        units: usize,
        /// The activation.
        activation: Activation,
        /// L2 penalty on W.
        l2: f64,
    },
    /// A learned vector per category, flattened over the input's columns.
    Embedding {
        /// Vector width.
        dim: usize,
    },
    /// Batch normalisation over the batch.
    BatchNorm {
        /// Running statistics' momentum.
        momentum: f64,
        /// Added to the variance.
        epsilon: f64,
    },
    /// Drops a fraction of values while training.
    Dropout {
        /// The fraction.
        rate: f64,
    },
    /// Its inputs side by side.
    Concatenate,
    /// Everything after the batch dimension as one.
    Flatten,
    /// A new shape after the batch dimension.
    Reshape {
        /// The dimensions.
        shape: Vec<usize>,
    },
    /// An activation alone.
    Activation(Activation),
}

/// A checked layer with its name, what it reads and its output shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The layer's name.
    pub name: String,
    /// What it computes.
    pub layer: Layer,
    /// The names it reads.
    pub reads: Vec<String>,
    /// Its output's dimensions after the batch.
    pub shape: Vec<usize>,
}

fn spec_error(layer: &str, what: &str) -> Error {
    Error::Spec(format!("layer '{layer}': {what}"))
}

/// The number of values of `dims`, or an error naming `what` if it
/// overflows: later code multiplies and allocates with it.
fn values(dims: &[usize], what: &str) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::Spec(format!(
                "{what}: {dims:?} holds more values than fit in memory"
            ))
        })
}

impl ModelSpec {
    /// Parses and checks a spec.
    pub fn from_json(json: &str) -> Result<ModelSpec> {
        let spec: ModelSpec = serde_json::from_str(json).map_err(|e| Error::Spec(e.to_string()))?;
        spec.plan()?;
        Ok(spec)
    }

    /// The spec as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a spec always serialises")
    }

    /// Every table column the model reads, in input order.
    pub fn input_columns(&self) -> Vec<String> {
        let mut columns = Vec::new();
        for input in &self.inputs {
            for column in input.column_names() {
                if !columns.contains(&column) {
                    columns.push(column);
                }
            }
        }
        columns
    }

    /// The outputs' names and widths.
    pub fn outputs(&self, column_widths: &dyn Fn(&str) -> usize) -> Result<Vec<(String, usize)>> {
        let shapes = self.shapes(column_widths)?;
        Ok(self
            .outputs
            .iter()
            .map(|o| (o.clone(), shapes[o].iter().product()))
            .collect())
    }

    /// The layers in order, checked, assuming every column has width 1.
    pub fn plan(&self) -> Result<Vec<Node>> {
        self.plan_with(&|_| 1)
    }

    /// Output dimensions of every input and layer by name.
    fn shapes(&self, column_widths: &dyn Fn(&str) -> usize) -> Result<HashMap<String, Vec<usize>>> {
        let mut shapes = self.input_shapes(column_widths)?;
        for node in self.plan_with(column_widths)? {
            shapes.insert(node.name, node.shape);
        }
        Ok(shapes)
    }

    fn input_shapes(
        &self,
        column_widths: &dyn Fn(&str) -> usize,
    ) -> Result<HashMap<String, Vec<usize>>> {
        if self.inputs.is_empty() {
            return Err(Error::Spec("a model needs at least one input".into()));
        }
        let mut shapes = HashMap::new();
        for input in &self.inputs {
            let widths: Vec<usize> = input
                .column_names()
                .iter()
                .map(|c| column_widths(c))
                .collect();
            let sum = widths.iter().try_fold(0usize, |sum, &w| sum.checked_add(w));
            let width = sum.ok_or_else(|| {
                Error::Spec(format!(
                    "input '{}': columns of widths {widths:?} hold more values than fit in memory",
                    input.name
                ))
            })?;
            match input.kind {
                InputType::Float => {}
                InputType::Categorical => match input.vocabulary {
                    Some(v) if v > 0 => {}
                    _ => {
                        return Err(Error::Spec(format!(
                            "input '{}': a categorical input needs \"vocabulary\" > 0",
                            input.name
                        )))
                    }
                },
            }
            if shapes.insert(input.name.clone(), vec![width]).is_some() {
                return Err(Error::Spec(format!("'{}' is defined twice", input.name)));
            }
        }
        Ok(shapes)
    }

    /// The layers in order, checked, with their output shapes for the given column widths.
    pub fn plan_with(&self, column_widths: &dyn Fn(&str) -> usize) -> Result<Vec<Node>> {
        let mut shapes = self.input_shapes(column_widths)?;
        let categorical: HashMap<&str, usize> = self
            .inputs
            .iter()
            .filter(|i| i.kind == InputType::Categorical)
            .map(|i| (i.name.as_str(), i.vocabulary.unwrap_or(0)))
            .collect();
        let mut nodes = Vec::with_capacity(self.layers.len());
        for spec in &self.layers {
            let name = spec.name.as_str();
            let reads = if spec.kind == "concatenate" {
                if spec.inputs.is_empty() {
                    return Err(spec_error(name, "concatenate needs \"inputs\""));
                }
                spec.inputs.clone()
            } else {
                vec![spec
                    .input
                    .clone()
                    .ok_or_else(|| spec_error(name, "needs \"input\""))?]
            };
            let mut in_shapes = Vec::new();
            for read in &reads {
                let shape = shapes.get(read).ok_or_else(|| {
                    spec_error(
                        name,
                        &format!("reads '{read}', which is not defined before it"),
                    )
                })?;
                in_shapes.push(shape.clone());
            }
            let first = &in_shapes[0];
            let flat = values(first, &format!("layer '{name}': the input's shape"))?;
            let overflow = || spec_error(name, "its output holds more values than fit in memory");
            let need = |field: &str, value: Option<usize>| {
                value
                    .filter(|v| *v > 0)
                    .ok_or_else(|| spec_error(name, &format!("needs \"{field}\" > 0")))
            };
            let (layer, shape) = match spec.kind.as_str() {
                "dense" => {
                    if first.len() != 1 {
                        return Err(spec_error(name, &format!("dense reads 1-d features, got shape {first:?}; flatten first")));
                    }
                    let units = need("units", spec.units)?;
                    let activation = Activation::parse(spec.activation.as_deref().unwrap_or("linear"), spec.scale, name)?;
                    let l2 = spec.l2.unwrap_or(0.0);
                    if !(l2 >= 0.0 && l2.is_finite()) {
                        return Err(spec_error(name, "\"l2\" must be finite and >= 0"));
                    }
                    (Layer::Dense { units, activation, l2 }, vec![units])
                }
                "embedding" => {
                    if !categorical.contains_key(reads[0].as_str()) {
                        return Err(spec_error(name, &format!("an embedding reads a categorical input, not '{}'", reads[0])));
                    }
                    let dim = need("dim", spec.dim)?;
                    (Layer::Embedding { dim }, vec![flat.checked_mul(dim).ok_or_else(overflow)?])
                }
                "batch_norm" => {
                    if first.len() != 1 {
                        return Err(spec_error(name, &format!("batch_norm reads 1-d features, got shape {first:?}")));
                    }
                    let momentum = spec.momentum.unwrap_or(0.99);
                    let epsilon = spec.epsilon.unwrap_or(1e-3);
                    (Layer::BatchNorm { momentum, epsilon }, first.clone())
                }
                "dropout" => {
                    let rate = spec.rate.ok_or_else(|| spec_error(name, "needs \"rate\""))?;
                    if !(0.0..1.0).contains(&rate) {
                        return Err(spec_error(name, "\"rate\" must be in [0, 1)"));
                    }
                    (Layer::Dropout { rate }, first.clone())
                }
                "concatenate" => {
                    let mut width = 0;
                    for (read, shape) in reads.iter().zip(&in_shapes) {
                        if shape.len() != 1 {
                            return Err(spec_error(name, &format!("concatenates 1-d features; '{read}' has shape {shape:?}")));
                        }
                        width = shape[0].checked_add(width).ok_or_else(overflow)?;
                    }
                    (Layer::Concatenate, vec![width])
                }
                "flatten" => (Layer::Flatten, vec![flat]),
                "reshape" => {
                    let wanted = values(&spec.shape, &format!("layer '{name}': \"shape\""))?;
                    if spec.shape.is_empty() || wanted != flat {
                        return Err(spec_error(name, &format!("\"shape\" {:?} must hold the input's {flat} values", spec.shape)));
                    }
                    (Layer::Reshape { shape: spec.shape.clone() }, spec.shape.clone())
                }
                "activation" => {
                    let activation = spec.activation.as_deref().ok_or_else(|| spec_error(name, "needs \"activation\""))?;
                    (Layer::Activation(Activation::parse(activation, spec.scale, name)?), first.clone())
                }
                other => {
                    return Err(spec_error(
                        name,
                        &format!("unknown type '{other}' (dense, embedding, batch_norm, dropout, concatenate, flatten, reshape, activation)"),
                    ))
                }
            };
            if shapes.insert(name.to_string(), shape.clone()).is_some() {
                return Err(Error::Spec(format!("'{name}' is defined twice")));
            }
            nodes.push(Node {
                name: name.to_string(),
                layer,
                reads,
                shape,
            });
        }
        if self.outputs.is_empty() {
            return Err(Error::Spec("a model needs at least one output".into()));
        }
        for output in &self.outputs {
            if !shapes.contains_key(output) {
                return Err(Error::Spec(format!(
                    "output '{output}' is not a layer or input"
                )));
            }
        }
        Ok(nodes)
    }
}
