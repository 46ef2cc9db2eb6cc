//! Optimizers, as Keras defines them, on plain `f32` parameter vectors: the
//! gradients arrive averaged over ranks as plain vectors, and updating in
//! place keeps every rank's arithmetic identical.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The optimizer's settings, as the training config gives them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// sgd, adam or adamw.
    #[serde(default = "default_name")]
    pub name: String,
    /// Step size.
    #[serde(default = "default_learning_rate")]
    pub learning_rate: f64,
    /// sgd's momentum.
    #[serde(default)]
    pub momentum: f64,
    /// sgd: Nesterov momentum.
    #[serde(default)]
    pub nesterov: bool,
    /// Adam's first-moment decay.
    #[serde(default = "default_beta1")]
    pub beta1: f64,
    /// Adam's second-moment decay.
    #[serde(default = "default_beta2")]
    pub beta2: f64,
    /// Adam's epsilon.
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
    /// AdamW's decoupled weight decay (times the learning rate).
    #[serde(default)]
    pub weight_decay: f64,
}

fn default_name() -> String {
    "adam".into()
}
fn default_learning_rate() -> f64 {
    0.001
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_epsilon() -> f64 {
    1e-7
}

impl Default for OptimizerConfig {
    fn default() -> OptimizerConfig {
        serde_json::from_str("{}").expect("defaults parse")
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Sgd,
    Adam,
    AdamW,
}

/// An optimizer and its state for every trainable parameter.
#[derive(Debug, Clone)]
pub struct Optimizer {
    config: OptimizerConfig,
    kind: Kind,
    /// Steps taken.
    pub step: u64,
    /// sgd's velocity, or Adam's first moment, per parameter.
    pub first: Vec<Vec<f32>>,
    /// Adam's second moment, per parameter.
    pub second: Vec<Vec<f32>>,
}

impl Optimizer {
    /// An optimizer for parameters of the given sizes.
    pub fn new(config: OptimizerConfig, sizes: &[usize]) -> Result<Optimizer> {
        let kind = match config.name.to_ascii_lowercase().as_str() {
            "sgd" => Kind::Sgd,
            "adam" => Kind::Adam,
            "adamw" => Kind::AdamW,
            other => {
                return Err(Error::Config(format!(
                    "unknown optimizer '{other}' (sgd, adam, adamw)"
                )))
            }
        };
        if !(config.learning_rate > 0.0 && config.learning_rate.is_finite()) {
            return Err(Error::Config(format!(
                "learning_rate must be > 0, got {}",
                config.learning_rate
            )));
        }
        // The estimator sends every setting whatever the optimizer; one that
        // this optimizer would ignore is an error rather than a silent no-op.
        if config.weight_decay != 0.0 && kind != Kind::AdamW {
            return Err(Error::Config(format!(
                "weight_decay applies to adamw only; use \"adamw\" or a weight_decay of 0 with {}",
                config.name
            )));
        }
        if config.momentum != 0.0 && kind != Kind::Sgd {
            return Err(Error::Config(format!(
                "momentum applies to sgd only; use \"sgd\" or a momentum of 0 with {}",
                config.name
            )));
        }
        let unit = 0.0..1.0;
        let valid = unit.contains(&config.momentum)
            && unit.contains(&config.beta1)
            && unit.contains(&config.beta2)
            && config.epsilon > 0.0
            && config.weight_decay >= 0.0;
        if !valid {
            return Err(Error::Config(
                "optimizer: momentum, beta1 and beta2 must be in [0, 1), epsilon > 0, weight_decay >= 0"
                    .into(),
            ));
        }
        let zeros = || sizes.iter().map(|&n| vec![0.0; n]).collect::<Vec<_>>();
        let second = if kind == Kind::Sgd {
            Vec::new()
        } else {
            zeros()
        };
        Ok(Optimizer {
            config,
            kind,
            step: 0,
            first: zeros(),
            second,
        })
    }

    /// How many values the optimizer updates: the trainable parameters' total.
    pub fn values(&self) -> usize {
        self.first.iter().map(Vec::len).sum()
    }

    /// Applies one step: `params[i] -= ...` from `grads[i]`.
    pub fn apply(&mut self, params: &mut [&mut [f32]], grads: &[&[f32]]) {
        self.step += 1;
        let c = &self.config;
        let lr = c.learning_rate;
        match self.kind {
            Kind::Sgd => {
                let (m, lr32) = (c.momentum as f32, lr as f32);
                for (i, (w, g)) in params.iter_mut().zip(grads).enumerate() {
                    let v = &mut self.first[i];
                    for ((w, g), v) in w.iter_mut().zip(g.iter()).zip(v.iter_mut()) {
                        *v = m * *v - lr32 * g;
                        *w += if c.nesterov { m * *v - lr32 * g } else { *v };
                    }
                }
            }
            Kind::Adam | Kind::AdamW => {
                let t = self.step as i32;
                let lr_t = (lr * (1.0 - c.beta2.powi(t)).sqrt() / (1.0 - c.beta1.powi(t))) as f32;
                let (b1, b2, eps) = (c.beta1 as f32, c.beta2 as f32, c.epsilon as f32);
                let decay = if self.kind == Kind::AdamW {
                    (lr * c.weight_decay) as f32
                } else {
                    0.0
                };
                for (i, (w, g)) in params.iter_mut().zip(grads).enumerate() {
                    let (m, v) = (&mut self.first[i], &mut self.second[i]);
                    for (((w, g), m), v) in w
                        .iter_mut()
                        .zip(g.iter())
                        .zip(m.iter_mut())
                        .zip(v.iter_mut())
                    {
                        *m = b1 * *m + (1.0 - b1) * g;
                        *v = b2 * *v + (1.0 - b2) * g * g;
                        *w -= lr_t * *m / (v.sqrt() + eps) + decay * *w;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(config: &str, w: f32, g: f32, steps: usize) -> f32 {
        let mut opt = Optimizer::new(serde_json::from_str(config).unwrap(), &[1]).unwrap();
        let mut w = [w];
        for _ in 0..steps {
            opt.apply(&mut [&mut w[..]], &[&[g][..]]);
        }
        w[0]
    }

    #[test]
    fn sgd_with_momentum_matches_keras() {
        // v1 = -0.1 * 2 = -0.2; w = 0.8. v2 = 0.9 * -0.2 - 0.2 = -0.38; w = 0.42.
        assert!(
            (step(
                r#"{"name":"sgd","learning_rate":0.1,"momentum":0.9}"#,
                1.0,
                2.0,
                1
            ) - 0.8)
                .abs()
                < 1e-6
        );
        assert!(
            (step(
                r#"{"name":"sgd","learning_rate":0.1,"momentum":0.9}"#,
                1.0,
                2.0,
                2
            ) - 0.42)
                .abs()
                < 1e-6
        );
    }

    #[test]
    fn plain_and_nesterov_sgd_match_keras() {
        // No momentum: w = 1 - 0.1 * 2 = 0.8, then 0.6.
        let sgd = r#"{"name":"sgd","learning_rate":0.1}"#;
        assert!((step(sgd, 1.0, 2.0, 2) - 0.6).abs() < 1e-6);
        // Nesterov: v1 = -0.2, w1 = 1 + 0.9 * -0.2 - 0.2 = 0.62;
        // v2 = 0.9 * -0.2 - 0.2 = -0.38, w2 = 0.62 + 0.9 * -0.38 - 0.2 = 0.078.
        let nesterov = r#"{"name":"sgd","learning_rate":0.1,"momentum":0.9,"nesterov":true}"#;
        assert!((step(nesterov, 1.0, 2.0, 1) - 0.62).abs() < 1e-6);
        assert!((step(nesterov, 1.0, 2.0, 2) - 0.078).abs() < 1e-6);
    }

    #[test]
    fn adam_second_step_matches_hand_computed_values() {
        // g = 3 both steps, lr 0.01. Step 2: m = 0.9 * 0.3 + 0.3 = 0.57, v = 0.999 * 0.009
        // + 0.009 = 0.017991, lr_t = 0.01 * sqrt(1 - 0.999^2) / (1 - 0.81) = 0.0023531,
        // step = lr_t * 0.57 / (sqrt(0.017991) + 1e-7) = 0.0100000 (about lr again).
        let w = step(r#"{"name":"adam","learning_rate":0.01}"#, 1.0, 3.0, 2);
        let lr_t = 0.01 * (1.0f64 - 0.999 * 0.999).sqrt() / (1.0 - 0.81);
        let expected = 1.0 - 0.01 - lr_t * 0.57 / (0.017991f64.sqrt() + 1e-7);
        assert!((w as f64 - expected).abs() < 1e-5, "{w} vs {expected}");
        assert!((w - 0.98).abs() < 1e-4, "{w}");
    }

    #[test]
    fn adam_first_step_moves_by_the_learning_rate() {
        // Step 1: m = 0.1 g, v = 0.001 g^2, lr_t = lr * sqrt(0.001) / 0.1, so the step is
        // lr * g / (|g| + eps / sqrt(0.001)) ~ lr for any g.
        let w = step(r#"{"name":"adam","learning_rate":0.01}"#, 1.0, 3.0, 1);
        assert!((w - (1.0 - 0.01)).abs() < 1e-5, "{w}");
        // AdamW also shrinks the weight by lr * weight_decay * w.
        let w = step(
            r#"{"name":"adamw","learning_rate":0.01,"weight_decay":0.5}"#,
            1.0,
            3.0,
            1,
        );
        assert!((w - (1.0 - 0.01 - 0.005)).abs() < 1e-5, "{w}");
    }

    #[test]
    fn settings_the_optimizer_would_ignore_are_errors() {
        let err = |json: &str| {
            Optimizer::new(serde_json::from_str(json).unwrap(), &[1])
                .unwrap_err()
                .to_string()
        };
        assert!(err(r#"{"name":"adam","weight_decay":0.01}"#)
            .contains("weight_decay applies to adamw only"));
        assert!(err(r#"{"name":"sgd","weight_decay":0.01}"#)
            .contains("weight_decay applies to adamw only"));
        assert!(err(r#"{"name":"adamw","momentum":0.9}"#).contains("momentum applies to sgd only"));
        assert!(err(r#"{"name":"sgd","momentum":1.5}"#).contains("momentum, beta1 and beta2"));
        // What the estimator sends by default is fine for every optimizer.
        for name in ["sgd", "adam", "adamw"] {
            let json = format!(
                r#"{{"name":"{name}","learning_rate":0.001,"momentum":0.0,"weight_decay":0.0,"epsilon":1e-7}}"#
            );
            assert!(Optimizer::new(serde_json::from_str(&json).unwrap(), &[1]).is_ok());
        }
    }

    #[test]
    fn unknown_optimizer_is_named() {
        let err =
            Optimizer::new(serde_json::from_str(r#"{"name":"lbfgs"}"#).unwrap(), &[1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "training config: unknown optimizer 'lbfgs' (sgd, adam, adamw)"
        );
    }
}
