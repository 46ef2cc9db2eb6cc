//! `horovod-bench-train`: the native trainer (candle) training
//! `make bench-estimator`'s Rossmann-shaped MLP (36 float columns,
//! 36-H-H-1, ReLU, Adam 1e-3, MSE) in this one process, with nothing around
//! it: no Spark, no other rank. Prints `trainer,native,<threads>,<steps per
//! second>,<loss>` per run, as `examples/bench/bench_trainer.py` prints
//! torch's on the same rows and batches (`make bench-trainer` runs both).
//!
//! Threads: candle's matrix products use `RAYON_NUM_THREADS` threads (the
//! caller sets it, as for torch's `set_num_threads`).
//!
//! Usage: `horovod-bench-train ROWS EPOCHS BATCH HIDDEN`.

use std::process::ExitCode;
use std::time::Instant;

use horovod_data::{Column, Table};
use horovod_train::{ModelSpec, Single, TrainConfig, Trainer};

const FEATURES: usize = 36;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("horovod-bench-train: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|_| format!("{a:?} is not a count")))
        .collect::<Result<_, _>>()?;
    let [rows, epochs, batch, hidden] = args[..] else {
        return Err("usage: horovod-bench-train ROWS EPOCHS BATCH HIDDEN".into());
    };
    let names: Vec<String> = (0..FEATURES).map(|i| format!("f{i}")).collect();
    let spec = serde_json::json!({
        "inputs": [{"name": "x", "type": "float", "columns": names}],
        "layers": [
            {"name": "h1", "type": "dense", "input": "x", "units": hidden, "activation": "relu"},
            {"name": "h2", "type": "dense", "input": "h1", "units": hidden, "activation": "relu"},
            {"name": "y_hat", "type": "dense", "input": "h2", "units": 1}
        ],
        "outputs": ["y_hat"]
    });
    let config = serde_json::json!({
        "label_columns": ["label"], "batch_size": batch, "epochs": epochs,
        "optimizer": {"name": "adam", "learning_rate": 1e-3}, "loss": "mse",
        "steps_per_epoch": rows / batch
    });
    let spec = ModelSpec::from_json(&spec.to_string()).map_err(|e| e.to_string())?;
    let config = TrainConfig::from_json(&config.to_string()).map_err(|e| e.to_string())?;
    let mut trainer =
        Trainer::new(spec, config, table(rows)?, &Single, None).map_err(|e| e.to_string())?;
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into());
    let started = Instant::now();
    let mut loss = f64::NAN;
    for _ in 0..epochs {
        let report = trainer.run_epoch(&Single).map_err(|e| e.to_string())?;
        loss = report.train.get("loss").copied().unwrap_or(f64::NAN);
    }
    let steps = (epochs * (rows / batch)) as f64;
    println!(
        "trainer,native,{threads},{:.1},{loss:.4}",
        steps / started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `rows` rows of standard-normal-ish features and a label linear in them
/// plus noise (a fixed generator: the same rows every run).
fn table(rows: usize) -> Result<Table, String> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut features: Vec<Vec<f32>> = (0..FEATURES).map(|_| Vec::with_capacity(rows)).collect();
    let mut label = Vec::with_capacity(rows);
    for _ in 0..rows {
        let mut y = 0.0;
        for (i, column) in features.iter_mut().enumerate() {
            let x = 3.4 * uniform();
            y += x * ((i % 5) as f32 - 2.0) * 0.1;
            column.push(x);
        }
        label.push(y + 0.1 * uniform());
    }
    let mut columns: Vec<Column> = features
        .into_iter()
        .enumerate()
        .map(|(i, values)| Column::new(format!("f{i}"), 1, values))
        .collect();
    columns.push(Column::new("label", 1, label));
    Table::new(rows, columns).map_err(|e| e.to_string())
}
