//! Losses (on tensors, for backprop) and metrics (on plain values, summed
//! over rows so ranks can add theirs up).

use candle_core::{DType, Tensor};

use crate::error::{Error, Result};

/// Probabilities are kept in [EPSILON, 1 - EPSILON] before a log, as Keras does.
const EPSILON: f64 = 1e-7;

/// A loss function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Mean squared error.
    Mse,
    /// Mean absolute error.
    Mae,
    /// Binary cross-entropy of probabilities.
    BinaryCrossentropy,
    /// Cross-entropy of probability rows against one-hot labels.
    CategoricalCrossentropy,
    /// Cross-entropy of probability rows against class indices.
    SparseCategoricalCrossentropy,
}

impl Loss {
    /// The loss called `name`.
    pub fn parse(name: &str) -> Result<Loss> {
        Ok(match name {
            "mse" | "mean_squared_error" => Loss::Mse,
            "mae" | "mean_absolute_error" => Loss::Mae,
            "binary_crossentropy" => Loss::BinaryCrossentropy,
            "categorical_crossentropy" => Loss::CategoricalCrossentropy,
            "sparse_categorical_crossentropy" => Loss::SparseCategoricalCrossentropy,
            other => {
                return Err(Error::Config(format!(
                "unknown loss '{other}' (mse, mae, binary_crossentropy, categorical_crossentropy, \
                     sparse_categorical_crossentropy)"
            )))
            }
        })
    }

    /// The name metrics report it under.
    pub fn name(self) -> &'static str {
        match self {
            Loss::Mse => "mse",
            Loss::Mae => "mae",
            Loss::BinaryCrossentropy => "binary_crossentropy",
            Loss::CategoricalCrossentropy => "categorical_crossentropy",
            Loss::SparseCategoricalCrossentropy => "sparse_categorical_crossentropy",
        }
    }

    /// The label width this loss expects for an output of `width`.
    pub fn label_width(self, width: usize) -> usize {
        match self {
            Loss::SparseCategoricalCrossentropy => 1,
            _ => width,
        }
    }

    /// The mean loss over a batch, differentiable in `pred`.
    pub fn tensor(self, pred: &Tensor, label: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Loss::Mse => pred.sub(label)?.sqr()?.mean_all()?,
            Loss::Mae => pred.sub(label)?.abs()?.mean_all()?,
            Loss::BinaryCrossentropy => {
                let p = pred.clamp(EPSILON, 1.0 - EPSILON)?;
                let positive = label.mul(&p.log()?)?;
                let negative = label.affine(-1.0, 1.0)?.mul(&p.affine(-1.0, 1.0)?.log()?)?;
                positive.add(&negative)?.neg()?.mean_all()?
            }
            Loss::CategoricalCrossentropy => {
                let p = pred.clamp(EPSILON, 1.0 - EPSILON)?;
                label.mul(&p.log()?)?.sum(1)?.neg()?.mean_all()?
            }
            Loss::SparseCategoricalCrossentropy => {
                let classes = label.to_dtype(DType::U32)?;
                let p = pred.gather(&classes, 1)?.clamp(EPSILON, 1.0 - EPSILON)?;
                p.log()?.neg()?.mean_all()?
            }
        })
    }

    /// The loss of one row, on plain values.
    pub fn row(self, pred: &[f32], label: &[f32]) -> f64 {
        let clamp = |p: f32| (p as f64).clamp(EPSILON, 1.0 - EPSILON);
        let n = pred.len() as f64;
        match self {
            Loss::Mse => {
                pred.iter()
                    .zip(label)
                    .map(|(p, y)| ((p - y) as f64).powi(2))
                    .sum::<f64>()
                    / n
            }
            Loss::Mae => {
                pred.iter()
                    .zip(label)
                    .map(|(p, y)| ((p - y) as f64).abs())
                    .sum::<f64>()
                    / n
            }
            Loss::BinaryCrossentropy => {
                pred.iter()
                    .zip(label)
                    .map(|(&p, &y)| {
                        -(y as f64 * clamp(p).ln() + (1.0 - y as f64) * (1.0 - clamp(p)).ln())
                    })
                    .sum::<f64>()
                    / n
            }
            Loss::CategoricalCrossentropy => -pred
                .iter()
                .zip(label)
                .map(|(&p, &y)| y as f64 * clamp(p).ln())
                .sum::<f64>(),
            Loss::SparseCategoricalCrossentropy => {
                let class = label[0] as usize;
                -clamp(pred.get(class).copied().unwrap_or(0.0)).ln()
            }
        }
    }
}

/// A metric reported per epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// A loss, averaged over rows.
    Loss(Loss),
    /// Share of rows classified right (threshold 0.5 for one output value, else argmax).
    Accuracy,
    /// sqrt(mean(((exp(y) - exp(pred)) / exp(y))^2)): Rossmann's error on log sales.
    ExpRmspe,
}

impl Metric {
    /// The metric called `name`.
    pub fn parse(name: &str) -> Result<Metric> {
        match name {
            "accuracy" | "acc" => Ok(Metric::Accuracy),
            "exp_rmspe" => Ok(Metric::ExpRmspe),
            other => Loss::parse(other).map(Metric::Loss).map_err(|_| {
                Error::Config(format!(
                    "unknown metric '{other}' (a loss name, accuracy or exp_rmspe)"
                ))
            }),
        }
    }

    /// The name it is reported under.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Loss(loss) => loss.name(),
            Metric::Accuracy => "accuracy",
            Metric::ExpRmspe => "exp_rmspe",
        }
    }

    /// This row's contribution to the metric's sum.
    pub fn row(self, pred: &[f32], label: &[f32]) -> f64 {
        match self {
            Metric::Loss(loss) => loss.row(pred, label),
            Metric::Accuracy => {
                let predicted = if pred.len() == 1 {
                    (pred[0] > 0.5) as usize
                } else {
                    argmax(pred)
                };
                let truth = if label.len() == 1 {
                    if pred.len() == 1 {
                        (label[0] > 0.5) as usize
                    } else {
                        label[0] as usize
                    }
                } else {
                    argmax(label)
                };
                (predicted == truth) as u8 as f64
            }
            Metric::ExpRmspe => {
                let y = (label[0] as f64).exp();
                let p = (pred[0] as f64).exp();
                ((y - p) / y).powi(2)
            }
        }
    }

    /// The metric from the sum of its rows' contributions over `rows` rows.
    pub fn finish(self, sum: f64, rows: f64) -> f64 {
        let mean = if rows > 0.0 { sum / rows } else { f64::NAN };
        match self {
            Metric::ExpRmspe => mean.sqrt(),
            _ => mean,
        }
    }
}

fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn t(values: &[f32], rows: usize) -> Tensor {
        Tensor::from_slice(values, (rows, values.len() / rows), &Device::Cpu).unwrap()
    }

    fn scalar(t: Tensor) -> f64 {
        t.to_scalar::<f32>().unwrap() as f64
    }

    #[test]
    fn losses_match_hand_computed_values() {
        let pred = t(&[1.0, 3.0], 2);
        let label = t(&[2.0, 1.0], 2);
        assert!((scalar(Loss::Mse.tensor(&pred, &label).unwrap()) - 2.5).abs() < 1e-6); // (1 + 4) / 2
        assert!((scalar(Loss::Mae.tensor(&pred, &label).unwrap()) - 1.5).abs() < 1e-6); // (1 + 2) / 2
        let p = t(&[0.8, 0.4], 2);
        let y = t(&[1.0, 0.0], 2);
        let bce = -(0.8f64.ln() + 0.6f64.ln()) / 2.0;
        assert!((scalar(Loss::BinaryCrossentropy.tensor(&p, &y).unwrap()) - bce).abs() < 1e-6);
        let probs = t(&[0.7, 0.2, 0.1, 0.1, 0.1, 0.8], 2);
        let onehot = t(&[1.0, 0.0, 0.0, 0.0, 0.0, 1.0], 2);
        let cce = -(0.7f64.ln() + 0.8f64.ln()) / 2.0;
        assert!(
            (scalar(
                Loss::CategoricalCrossentropy
                    .tensor(&probs, &onehot)
                    .unwrap()
            ) - cce)
                .abs()
                < 1e-6
        );
        let classes = t(&[0.0, 2.0], 2);
        assert!(
            (scalar(
                Loss::SparseCategoricalCrossentropy
                    .tensor(&probs, &classes)
                    .unwrap()
            ) - cce)
                .abs()
                < 1e-6
        );
        assert!(
            (Loss::SparseCategoricalCrossentropy.row(&[0.7, 0.2, 0.1], &[0.0]) + 0.7f64.ln()).abs()
                < 1e-6
        );
        assert!((Loss::BinaryCrossentropy.row(&[0.8], &[1.0]) + 0.8f64.ln()).abs() < 1e-6);
    }

    /// A metric named by a loss averages the loss's rows; over a batch that
    /// must equal the loss the optimizer minimises, or the reported training
    /// loss would not be the one trained on.
    #[test]
    fn metrics_named_by_a_loss_equal_the_batch_loss() {
        // Two rows of two values each.
        let pred = [0.9f32, 0.2, 0.3, 0.6];
        let label = [1.0f32, 0.0, 0.0, 1.0];
        // mse: ((0.1^2 + 0.2^2) / 2 + (0.3^2 + 0.4^2) / 2) / 2 = (0.025 + 0.125) / 2 = 0.075
        // mae: ((0.1 + 0.2) / 2 + (0.3 + 0.4) / 2) / 2 = 0.25
        let hand = [("mse", 0.075), ("mae", 0.25)];
        for (name, value) in hand {
            let metric = Metric::parse(name).unwrap();
            assert_eq!(metric.name(), name);
            let sum = metric.row(&pred[..2], &label[..2]) + metric.row(&pred[2..], &label[2..]);
            assert!((metric.finish(sum, 2.0) - value).abs() < 1e-6, "{name}");
        }
        for name in [
            "mse",
            "mae",
            "binary_crossentropy",
            "categorical_crossentropy",
        ] {
            let metric = Metric::parse(name).unwrap();
            let Metric::Loss(loss) = metric else {
                panic!("{name} is not a loss metric")
            };
            let sum = metric.row(&pred[..2], &label[..2]) + metric.row(&pred[2..], &label[2..]);
            let batch = scalar(loss.tensor(&t(&pred, 2), &t(&label, 2)).unwrap());
            assert!((metric.finish(sum, 2.0) - batch).abs() < 1e-6, "{name}");
        }
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        assert_eq!(Metric::Accuracy.row(&[0.7], &[1.0]), 1.0);
        assert_eq!(Metric::Accuracy.row(&[0.2, 0.5, 0.3], &[1.0]), 1.0);
        assert_eq!(
            Metric::Accuracy.row(&[0.2, 0.5, 0.3], &[0.0, 0.0, 1.0]),
            0.0
        );
        // y = ln 100, pred = ln 90: (100 - 90) / 100 = 0.1; squared 0.01.
        let row = Metric::ExpRmspe.row(&[(90.0f32).ln()], &[(100.0f32).ln()]);
        assert!((row - 0.01).abs() < 1e-6);
        assert!((Metric::ExpRmspe.finish(0.01 * 4.0, 4.0) - 0.1).abs() < 1e-6);
        assert!(Metric::parse("rmse")
            .unwrap_err()
            .to_string()
            .contains("unknown metric 'rmse'"));
        assert!(Loss::parse("hinge")
            .unwrap_err()
            .to_string()
            .contains("unknown loss 'hinge'"));
    }
}
