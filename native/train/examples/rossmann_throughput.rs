//! Training and prediction throughput of the Rossmann model
//! (examples/rossmann) on one process: `cargo run --release -p horovod-train
//! --example rossmann_throughput [rows] [batch]`. Prints CSV
//! `path,rows,columns,seconds,rows_per_s` with paths `train` (one epoch, as
//! `make bench-ingest` does) and `predict` (every row, with the trained
//! model, as `HorovodModel.transform`).

use std::time::Instant;

use horovod_data::{Column, Table};
use horovod_train::{ModelSpec, Predictor, Single, TrainConfig, Trainer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: usize = args
        .next()
        .map(|a| a.parse().expect("rows"))
        .unwrap_or(20_480);
    let batch: usize = args
        .next()
        .map(|a| a.parse().expect("batch"))
        .unwrap_or(256);
    let spec = ModelSpec::from_json(include_str!(
        "../../../examples/rossmann/rossmann-model.json"
    ))
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut columns = Vec::new();
    for input in &spec.inputs {
        for name in input.column_names() {
            let values = match input.vocabulary {
                Some(v) => (0..rows).map(|_| rng.gen_range(0..v) as f32).collect(),
                None => (0..rows).map(|_| rng.gen_range(-1.0..1.0)).collect(),
            };
            columns.push(Column::new(name, 1, values));
        }
    }
    columns.push(Column::new(
        "Sales",
        1,
        (0..rows).map(|_| rng.gen_range(7.0..10.0)).collect(),
    ));
    let table = Table::new(rows, columns.clone()).unwrap();
    let config = TrainConfig::from_json(&format!(
        r#"{{"label_columns": ["Sales"], "loss": "mae", "batch_size": {batch}, "epochs": 1,
            "optimizer": {{"name": "adam", "learning_rate": 0.0001, "epsilon": 0.001}}}}"#
    ))
    .unwrap();
    let mut trainer = Trainer::new(spec.clone(), config, table, &Single, None).unwrap();
    let report = trainer.run_epoch(&Single).unwrap();
    println!("path,rows,columns,seconds,rows_per_s");
    println!(
        "train,{},36,{:.3},{:.0}",
        report.samples, report.seconds, report.samples_per_second
    );
    let predictor = Predictor::new(spec, &trainer.model_bytes()).unwrap();
    let table = Table::new(rows, columns).unwrap();
    let started = Instant::now();
    let outputs = predictor.predict(&table).unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(outputs[0].values().len(), rows);
    println!(
        "predict,{rows},36,{seconds:.3},{:.0}",
        rows as f64 / seconds
    );
}
