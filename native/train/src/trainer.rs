//! Data-parallel training on one rank: the same steps on every rank, the
//! gradients summed across ranks each step, metrics summed each epoch.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use candle_core::{Device, Tensor};
use horovod_data::Table;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::blob;
use crate::collectives::Collectives;
use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::loss::{Loss, Metric};
use crate::model::{check_categories, Mode, Model};
use crate::optim::Optimizer;
use crate::shuffle::shuffle;
use crate::spec::ModelSpec;
use crate::threads::products_pool;

/// What one epoch did; identical on every rank.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EpochReport {
    /// The epoch, from 0.
    pub epoch: usize,
    /// Training loss and metrics, averaged over the epoch's rows of all ranks.
    pub train: BTreeMap<String, f64>,
    /// Validation loss and metrics (empty without validation).
    pub val: BTreeMap<String, f64>,
    /// Training rows processed by all ranks.
    pub samples: u64,
    /// Wall time of the epoch on this rank.
    pub seconds: f64,
    /// `samples / seconds`.
    pub samples_per_second: f64,
    /// Whether the monitored metric was the best so far.
    pub best: bool,
    /// Whether early stopping ends training after this epoch.
    pub stop: bool,
}

/// One rank's trainer.
pub struct Trainer {
    model: Model,
    optimizer: Optimizer,
    config: TrainConfig,
    loss: Loss,
    metrics: Vec<Metric>,
    data: Table,
    train_rows: Vec<usize>,
    val_rows: Vec<usize>,
    steps_per_epoch: usize,
    rank: usize,
    size: usize,
    history: Vec<EpochReport>,
    best: Option<(f64, Vec<Vec<f32>>)>,
    stopped: bool,
    device: Device,
    /// The threads an epoch runs on; see [`Trainer::run_epoch`].
    pool: Arc<rayon::ThreadPool>,
}

impl Trainer {
    /// A trainer for this rank's `data`. Collective: every rank calls it.
    /// `resume` is a checkpoint to continue from (only rank 0's is used).
    pub fn new(
        spec: ModelSpec,
        config: TrainConfig,
        data: Table,
        comm: &dyn Collectives,
        resume: Option<&[u8]>,
    ) -> Result<Trainer> {
        let (rank, size) = (comm.rank(), comm.size());
        let loss = Loss::parse(&config.loss)?;
        let metrics = config
            .metrics
            .iter()
            .map(|m| Metric::parse(m))
            .collect::<Result<Vec<_>>>()?;
        let widths = check_columns(&spec, &config, &data)?;
        let mut init_rng = ChaCha8Rng::seed_from_u64(config.seed);
        let model = Model::new(spec, widths, &mut init_rng)?;
        check_labels(&model, &config, &data, loss)?;
        check_values(&model, &config, &data)?;
        let sizes: Vec<usize> = model
            .params()
            .iter()
            .filter(|p| p.trainable)
            .map(|p| p.values.len())
            .collect();
        let optimizer = Optimizer::new(config.optimizer.clone(), &sizes)?;
        check_monitor(&config, &model.spec().outputs, &metrics)?;
        let (train_rows, val_rows) = split(&config, &data, rank)?;

        // Every rank learns every rank's row counts, so all agree on the steps
        // per epoch and all fail together when a rank has nothing to train on.
        let mut counts = vec![0.0; 2 * size];
        counts[2 * rank] = train_rows.len() as f64;
        counts[2 * rank + 1] = val_rows.len() as f64;
        let counts = comm.allreduce_sum_f64("horovod.train.row_counts", counts)?;
        let train_counts: Vec<u64> = counts.iter().step_by(2).map(|&c| c as u64).collect();
        if let Some(empty) = train_counts.iter().position(|&c| c == 0) {
            return Err(Error::Data(format!(
                "rank {empty} has no training rows (training rows per rank: {train_counts:?}); \
                 use fewer ranks or more data"
            )));
        }
        let val_total: f64 = counts.iter().skip(1).step_by(2).sum();
        if config.has_validation() && val_total == 0.0 {
            // Without this every epoch would report a NaN validation loss, and
            // the default monitor (val_loss) would never pick a best epoch.
            return Err(Error::Data(
                "validation is configured but no rank has validation rows; \
                 check validation_column or raise validation_fraction"
                    .into(),
            ));
        }
        let total: u64 = train_counts.iter().sum();
        let per_step = (size * config.batch_size) as u64;
        let steps_per_epoch = config
            .steps_per_epoch
            .unwrap_or(total.div_ceil(per_step).max(1) as usize);

        let mut trainer = Trainer {
            model,
            optimizer,
            config,
            loss,
            metrics,
            data,
            train_rows,
            val_rows,
            steps_per_epoch,
            rank,
            size,
            history: Vec::new(),
            best: None,
            stopped: false,
            device: Device::Cpu,
            pool: Arc::new(products_pool("hvd-train")?),
        };
        // Rank 0's state (fresh, or the checkpoint's) becomes every rank's.
        let state = if rank == 0 {
            match resume {
                Some(bytes) => {
                    trainer.restore(bytes)?;
                    bytes.to_vec()
                }
                None => trainer.checkpoint(),
            }
        } else {
            Vec::new()
        };
        let state = comm.broadcast("horovod.train.initial_state", state, 0)?;
        trainer.restore(&state)?;
        Ok(trainer)
    }

    /// Whether training is over: every epoch done, or stopped early.
    pub fn done(&self) -> bool {
        self.stopped || self.history.len() >= self.config.epochs
    }

    /// The reports of the epochs so far.
    pub fn history(&self) -> &[EpochReport] {
        &self.history
    }

    /// The history as a JSON array.
    pub fn history_json(&self) -> String {
        serde_json::to_string(&self.history).expect("reports always serialise")
    }

    /// Steps each rank takes per epoch.
    pub fn steps_per_epoch(&self) -> usize {
        self.steps_per_epoch
    }

    /// Trains one epoch. Collective: every rank calls it.
    ///
    /// The epoch runs on a thread of the trainer's own pool (`threads`),
    /// the one candle's matrix products then split over. A pool of its own,
    /// not one shared, keeps the trainers of two ranks in one process (a
    /// local Spark) apart: a rank waiting in a collective never holds a
    /// thread another rank's epoch needs.
    pub fn run_epoch(&mut self, comm: &dyn Collectives) -> Result<EpochReport> {
        let pool = Arc::clone(&self.pool);
        pool.install(|| self.train_epoch(comm))
    }

    fn train_epoch(&mut self, comm: &dyn Collectives) -> Result<EpochReport> {
        let started = Instant::now();
        let epoch = self.history.len();
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.config.seed
                ^ ((epoch as u64 + 1) << 32)
                ^ (self.rank as u64).wrapping_mul(0x9E37_79B9),
        );
        let batch = self.config.batch_size;
        let mut order = shuffle(&self.train_rows, self.config.shuffle_buffer_size, &mut rng);
        let mut position = 0;
        let outputs = self.model.spec().outputs.clone();
        let mut sums = MetricSums::new(outputs.len(), self.metrics.len());
        let scale = 1.0 / self.size as f32;
        for _ in 0..self.steps_per_epoch {
            let mut rows = Vec::with_capacity(batch);
            while rows.len() < batch {
                if position == order.len() {
                    order = shuffle(&self.train_rows, self.config.shuffle_buffer_size, &mut rng);
                    position = 0;
                }
                rows.push(order[position]);
                position += 1;
            }
            let mut gradients = self.step(&rows, &mut rng, &mut sums)?;
            gradients = comm.allreduce_sum("horovod.train.gradients", gradients)?;
            gradients.iter_mut().for_each(|g| *g *= scale);
            self.apply(&gradients);
        }
        self.average_running_statistics(comm)?;
        let train = sums.finish(
            comm,
            "horovod.train.train_metrics",
            self.loss,
            &self.metrics,
            &outputs,
        )?;
        let val = if self.config.has_validation() {
            let mut val_sums = MetricSums::new(outputs.len(), self.metrics.len());
            let val_batch = self.config.val_batch_size.unwrap_or(batch);
            for chunk in self.val_rows.chunks(val_batch) {
                let (outputs, labels) = self.outputs_and_labels(chunk, Mode::Infer)?;
                val_sums.add(&outputs, &labels, self.loss, &self.metrics)?;
            }
            val_sums.finish(
                comm,
                "horovod.train.val_metrics",
                self.loss,
                &self.metrics,
                &outputs,
            )?
        } else {
            BTreeMap::new()
        };
        let seconds = started.elapsed().as_secs_f64();
        let samples = (self.steps_per_epoch * batch * self.size) as u64;
        let mut report = EpochReport {
            epoch,
            train,
            val,
            samples,
            seconds,
            samples_per_second: samples as f64 / seconds.max(1e-9),
            best: false,
            stop: false,
        };
        self.judge(&mut report)?;
        self.history.push(report.clone());
        Ok(report)
    }

    /// One step's forward and backward pass on `rows`: the gradients of
    /// every trainable parameter, flattened in parameter order.
    fn step(
        &mut self,
        rows: &[usize],
        rng: &mut ChaCha8Rng,
        sums: &mut MetricSums,
    ) -> Result<Vec<f32>> {
        let (tensors, vars) = self.model.tensors(&self.device, true)?;
        let inputs = self.model.inputs(&self.data, rows, &self.device)?;
        let (outputs, stats) = self.model.forward(&tensors, &inputs, Mode::Train(rng))?;
        let labels = self.labels(rows)?;
        let mut objective: Option<Tensor> = None;
        for (output, label) in outputs.iter().zip(&labels) {
            let term = self.loss.tensor(output, label)?;
            objective = Some(match objective {
                Some(o) => (o + term)?,
                None => term,
            });
        }
        let mut objective =
            objective.ok_or_else(|| Error::Spec("a model needs at least one output".into()))?;
        if let Some(penalty) = self.model.l2_penalty(&tensors)? {
            objective = (objective + penalty)?;
        }
        let grads = objective.backward()?;
        let mut flat = Vec::with_capacity(self.optimizer.values());
        for (param, var) in self.model.params().iter().zip(&vars) {
            if let Some(var) = var {
                match grads.get(var.as_tensor()) {
                    Some(g) => flat.extend(g.flatten_all()?.to_vec1::<f32>()?),
                    None => flat.extend(std::iter::repeat_n(0.0, param.values.len())),
                }
            }
        }
        sums.add(&outputs, &labels, self.loss, &self.metrics)?;
        for (moving, mean, variance, momentum) in stats.updates {
            let (mean, variance) = (mean.to_vec1::<f32>()?, variance.to_vec1::<f32>()?);
            let m = momentum as f32;
            let params = self.model.params_mut();
            for (running, batch) in [(moving, mean), (moving + 1, variance)] {
                for (r, b) in params[running].values.iter_mut().zip(batch) {
                    *r = m * *r + (1.0 - m) * b;
                }
            }
        }
        Ok(flat)
    }

    fn apply(&mut self, gradients: &[f32]) {
        let mut grads = Vec::new();
        let mut offset = 0;
        for p in self.model.params().iter().filter(|p| p.trainable) {
            grads.push(&gradients[offset..offset + p.values.len()]);
            offset += p.values.len();
        }
        let mut params: Vec<&mut [f32]> = self
            .model
            .params_mut()
            .iter_mut()
            .filter(|p| p.trainable)
            .map(|p| p.values.as_mut_slice())
            .collect();
        self.optimizer.apply(&mut params, &grads);
    }

    /// Batch norm's running statistics differ per rank (each saw its own
    /// batches); their average keeps every rank's model identical.
    fn average_running_statistics(&mut self, comm: &dyn Collectives) -> Result<()> {
        let running: Vec<f32> = self
            .model
            .params()
            .iter()
            .filter(|p| !p.trainable)
            .flat_map(|p| p.values.iter().copied())
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        let summed = comm.allreduce_sum("horovod.train.running_statistics", running)?;
        let scale = 1.0 / self.size as f32;
        let mut offset = 0;
        for p in self.model.params_mut().iter_mut().filter(|p| !p.trainable) {
            for (v, s) in p.values.iter_mut().zip(&summed[offset..]) {
                *v = s * scale;
            }
            offset += p.values.len();
        }
        Ok(())
    }

    fn labels(&self, rows: &[usize]) -> Result<Vec<Tensor>> {
        self.config
            .label_columns
            .iter()
            .map(|name| {
                let column = self
                    .data
                    .column(name)
                    .ok_or_else(|| Error::Data(format!("label column '{name}' is missing")))?;
                Ok(Tensor::from_vec(
                    column.gather(rows),
                    (rows.len(), column.width()),
                    &self.device,
                )?)
            })
            .collect()
    }

    fn outputs_and_labels(
        &self,
        rows: &[usize],
        mode: Mode<'_>,
    ) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        let (tensors, _) = self.model.tensors(&self.device, false)?;
        let inputs = self.model.inputs(&self.data, rows, &self.device)?;
        let (outputs, _) = self.model.forward(&tensors, &inputs, mode)?;
        Ok((outputs, self.labels(rows)?))
    }

    /// Marks the best epoch by the monitored metric and decides early stopping.
    fn judge(&mut self, report: &mut EpochReport) -> Result<()> {
        let monitor = self.monitor();
        let value = match monitor.strip_prefix("val_") {
            Some(name) if self.config.has_validation() => report.val.get(name),
            _ => report.train.get(&monitor),
        };
        let outputs = &self.model.spec().outputs;
        let value = *value.ok_or_else(|| unknown_monitor(&monitor, outputs, &self.metrics))?;
        let higher_is_better = monitor.ends_with("accuracy");
        let improved = match &self.best {
            None => true,
            Some((best, _)) => {
                if higher_is_better {
                    value > *best
                } else {
                    value < *best
                }
            }
        };
        if improved && value.is_finite() {
            report.best = true;
            self.best = Some((
                value,
                self.model
                    .params()
                    .iter()
                    .map(|p| p.values.clone())
                    .collect(),
            ));
        }
        if let Some(patience) = self.config.early_stopping_patience.filter(|&p| p > 0) {
            let since_best = self.history.iter().rev().take_while(|r| !r.best).count()
                + usize::from(!report.best);
            if since_best >= patience {
                report.stop = true;
                self.stopped = true;
            }
        }
        Ok(())
    }

    fn monitor(&self) -> String {
        monitor_of(&self.config)
    }

    /// The weights to keep: the best epoch's by the monitored metric, else the last.
    pub fn model_bytes(&self) -> Vec<u8> {
        let values: Vec<&[f32]> = match &self.best {
            Some((_, best)) => best.iter().map(Vec::as_slice).collect(),
            None => self
                .model
                .params()
                .iter()
                .map(|p| p.values.as_slice())
                .collect(),
        };
        crate::predictor::encode_model(&self.model, &values)
    }

    /// Everything needed to continue exactly from here.
    pub fn checkpoint(&self) -> Vec<u8> {
        let mut arrays: Vec<(String, &[f32])> = Vec::new();
        for p in self.model.params() {
            arrays.push((format!("param/{}", p.name), &p.values));
        }
        for (i, m) in self.optimizer.first.iter().enumerate() {
            arrays.push((format!("first/{i}"), m));
        }
        for (i, v) in self.optimizer.second.iter().enumerate() {
            arrays.push((format!("second/{i}"), v));
        }
        if let Some((_, best)) = &self.best {
            for (p, values) in self.model.params().iter().zip(best) {
                arrays.push((format!("best/{}", p.name), values));
            }
        }
        let meta = serde_json::json!({
            "kind": "horovod-rs checkpoint",
            "spec": self.model.spec().to_json(),
            "optimizer_step": self.optimizer.step,
            "history": self.history,
            "best_value": self.best.as_ref().map(|(v, _)| *v),
            "stopped": self.stopped,
        });
        blob::encode(meta, &arrays)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        let (meta, arrays) = blob::decode(bytes)?;
        if meta["kind"] != "horovod-rs checkpoint" {
            return Err(Error::Checkpoint("not a training checkpoint".into()));
        }
        if meta["spec"].as_str() != Some(self.model.spec().to_json().as_str()) {
            return Err(Error::Checkpoint(
                "the checkpoint is of a different model spec; use a new run id".into(),
            ));
        }
        let mut params = Vec::new();
        let mut best = Vec::new();
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for (name, values) in arrays {
            if let Some(p) = name.strip_prefix("param/") {
                params.push((p.to_string(), values));
            } else if name.starts_with("first/") {
                first.push(values);
            } else if name.starts_with("second/") {
                second.push(values);
            } else if name.starts_with("best/") {
                best.push(values);
            }
        }
        self.model.load_params(&params)?;
        // Same arrays of the same lengths: the optimizer zips them with the
        // parameters, so a short one would silently skip values.
        let lens = |arrays: &[Vec<f32>]| arrays.iter().map(Vec::len).collect::<Vec<_>>();
        if lens(&first) != lens(&self.optimizer.first)
            || lens(&second) != lens(&self.optimizer.second)
        {
            return Err(Error::Checkpoint(
                "the checkpoint's optimizer differs from the config's".into(),
            ));
        }
        let param_lens: Vec<usize> = self.model.params().iter().map(|p| p.values.len()).collect();
        if meta["best_value"].as_f64().is_some() && lens(&best) != param_lens {
            return Err(Error::Checkpoint(
                "the checkpoint's best weights do not fit the model".into(),
            ));
        }
        self.optimizer.first = first;
        self.optimizer.second = second;
        self.optimizer.step = meta["optimizer_step"].as_u64().unwrap_or(0);
        self.history = serde_json::from_value(meta["history"].clone())
            .map_err(|e| Error::Checkpoint(format!("bad history: {e}")))?;
        self.best = meta["best_value"].as_f64().map(|v| (v, best));
        self.stopped = meta["stopped"].as_bool().unwrap_or(false);
        Ok(())
    }
}

/// The names an epoch reports, in order: "loss", then with one output each
/// metric by name, with several outputs (as Keras does) each output's loss
/// and metrics prefixed with its name ("loss" is then their total).
fn reported_names(outputs: &[String], metrics: &[Metric]) -> Vec<String> {
    let mut names = vec!["loss".to_string()];
    if let [_] = outputs {
        names.extend(metrics.iter().map(|m| m.name().to_string()));
    } else {
        for output in outputs {
            names.push(format!("{output}_loss"));
            names.extend(metrics.iter().map(|m| format!("{output}_{}", m.name())));
        }
    }
    names
}

/// Sums of each output's loss and metrics over rows, to be added up across
/// ranks.
struct MetricSums {
    /// Per output: the loss, then each metric.
    sums: Vec<Vec<f64>>,
    rows: f64,
}

impl MetricSums {
    fn new(outputs: usize, metrics: usize) -> MetricSums {
        MetricSums {
            sums: vec![vec![0.0; 1 + metrics]; outputs],
            rows: 0.0,
        }
    }

    fn add(
        &mut self,
        outputs: &[Tensor],
        labels: &[Tensor],
        loss: Loss,
        metrics: &[Metric],
    ) -> Result<()> {
        for ((output, label), sums) in outputs.iter().zip(labels).zip(&mut self.sums) {
            let (rows, width) = output.dims2()?;
            let label_width = label.dims2()?.1;
            let pred = output.detach().flatten_all()?.to_vec1::<f32>()?;
            let truth = label.flatten_all()?.to_vec1::<f32>()?;
            for r in 0..rows {
                let (p, y) = (
                    &pred[r * width..(r + 1) * width],
                    &truth[r * label_width..(r + 1) * label_width],
                );
                sums[0] += loss.row(p, y);
                for (sum, metric) in sums[1..].iter_mut().zip(metrics) {
                    *sum += metric.row(p, y);
                }
            }
        }
        self.rows += outputs
            .first()
            .map(|o| o.dims2().map(|d| d.0).unwrap_or(0))
            .unwrap_or(0) as f64;
        Ok(())
    }

    /// The epoch's values under [`reported_names`], over every rank's rows.
    fn finish(
        self,
        comm: &dyn Collectives,
        name: &str,
        loss: Loss,
        metrics: &[Metric],
        outputs: &[String],
    ) -> Result<BTreeMap<String, f64>> {
        let mut values = vec![self.rows];
        values.extend(self.sums.iter().flatten());
        let summed = comm.allreduce_sum_f64(name, values)?;
        let rows = summed[0];
        let per_output: Vec<Vec<f64>> = summed[1..]
            .chunks(1 + metrics.len())
            .map(|sums| {
                let mut finished = vec![Metric::Loss(loss).finish(sums[0], rows)];
                finished.extend(
                    metrics
                        .iter()
                        .zip(&sums[1..])
                        .map(|(m, s)| m.finish(*s, rows)),
                );
                finished
            })
            .collect();
        let total_loss = per_output.iter().map(|values| values[0]).sum();
        let values = std::iter::once(total_loss).chain(if outputs.len() == 1 {
            per_output[0][1..].to_vec()
        } else {
            per_output.concat()
        });
        Ok(reported_names(outputs, metrics)
            .into_iter()
            .zip(values)
            .collect())
    }
}

/// The monitored metric's name as reports key it (`val_` for validation).
fn monitor_of(config: &TrainConfig) -> String {
    config.monitor.clone().unwrap_or_else(|| {
        if config.has_validation() {
            "val_loss".into()
        } else {
            "loss".into()
        }
    })
}

fn unknown_monitor(monitor: &str, outputs: &[String], metrics: &[Metric]) -> Error {
    Error::Config(format!(
        "monitor '{monitor}' is not a reported metric ({}; val_ versions with validation)",
        reported_names(outputs, metrics).join(", ")
    ))
}

/// The monitor must name a reported metric, checked before the first epoch
/// rather than after it.
fn check_monitor(config: &TrainConfig, outputs: &[String], metrics: &[Metric]) -> Result<()> {
    let monitor = monitor_of(config);
    let name = match monitor.strip_prefix("val_") {
        Some(name) if config.has_validation() => name,
        _ => monitor.as_str(),
    };
    if reported_names(outputs, metrics).iter().any(|n| n == name) {
        Ok(())
    } else {
        Err(unknown_monitor(&monitor, outputs, metrics))
    }
}

/// Every column the spec reads must exist; returns each column's width.
fn check_columns(
    spec: &ModelSpec,
    config: &TrainConfig,
    data: &Table,
) -> Result<HashMap<String, usize>> {
    let available = || {
        data.columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect::<Vec<_>>()
    };
    let mut widths = HashMap::new();
    let mut wanted = spec.input_columns();
    wanted.extend(config.label_columns.iter().cloned());
    wanted.extend(config.validation_column.iter().cloned());
    for name in wanted {
        let column = data.column(&name).ok_or_else(|| {
            Error::Data(format!(
                "column '{name}' is missing; the data has {:?}",
                available()
            ))
        })?;
        widths.insert(name, column.width());
    }
    Ok(widths)
}

fn check_labels(model: &Model, config: &TrainConfig, data: &Table, loss: Loss) -> Result<()> {
    let outputs = model.outputs();
    if outputs.len() != config.label_columns.len() {
        return Err(Error::Config(format!(
            "{} label columns for {} model outputs {:?}",
            config.label_columns.len(),
            outputs.len(),
            outputs.iter().map(|o| &o.0).collect::<Vec<_>>()
        )));
    }
    for ((output, width), label) in outputs.iter().zip(&config.label_columns) {
        let label_width = data.column(label).map(|c| c.width()).unwrap_or(0);
        if label_width != loss.label_width(*width) {
            return Err(Error::Data(format!(
                "label column '{label}' has {label_width} values per row; output '{output}' with loss {} needs {}",
                loss.name(),
                loss.label_width(*width)
            )));
        }
        if loss == Loss::SparseCategoricalCrossentropy {
            // A class index outside the output would gather out of range.
            let values = data.column(label).map(|c| c.values()).unwrap_or(&[]);
            let bad = values
                .iter()
                .filter(|&&v| !(v >= 0.0 && v.fract() == 0.0 && (v as usize) < *width))
                .count();
            if bad > 0 {
                return Err(Error::Data(format!(
                    "label column '{label}' has {bad} values that are not class indices in [0, {width})"
                )));
            }
        }
    }
    Ok(())
}

/// NaN features or labels and bad category indices, named with their counts.
fn check_values(model: &Model, config: &TrainConfig, data: &Table) -> Result<()> {
    let mut columns = model.spec().input_columns();
    columns.extend(config.label_columns.iter().cloned());
    for name in &columns {
        let column = data.column(name).expect("checked before");
        let nan = column.values().iter().filter(|v| !v.is_finite()).count();
        if nan > 0 {
            return Err(Error::Data(format!(
                "column '{name}' has {nan} NaN or infinite values"
            )));
        }
    }
    check_categories(model.spec(), data)
}

/// Training and validation rows of this rank.
fn split(config: &TrainConfig, data: &Table, rank: usize) -> Result<(Vec<usize>, Vec<usize>)> {
    let all = 0..data.rows();
    if let Some(name) = &config.validation_column {
        let column = data.column(name).expect("checked before");
        if column.width() != 1 {
            return Err(Error::Data(format!(
                "validation column '{name}' must hold one value per row"
            )));
        }
        let (val, train): (Vec<usize>, Vec<usize>) = all.partition(|&r| column.row(r)[0] != 0.0);
        return Ok((train, val));
    }
    if let Some(fraction) = config.validation_fraction {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0x005E_ED0F_5A11 ^ rank as u64);
        let (val, train): (Vec<usize>, Vec<usize>) = all.partition(|_| rng.gen::<f64>() < fraction);
        return Ok((train, val));
    }
    Ok((all.collect(), Vec::new()))
}
