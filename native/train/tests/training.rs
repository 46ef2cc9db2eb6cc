//! Training on real data in one process: quality, reproducibility, data
//! parallelism over the collective engine (threads as ranks), checkpoints.

use std::thread;
use std::time::Duration;

use horovod_core::engine::LocalTransport;
use horovod_core::{Engine, EngineConfig};
use horovod_data::{Column, Table};
use horovod_train::{
    Collectives, EngineCollectives, ModelSpec, Predictor, Single, TrainConfig, Trainer,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const WAIT: Duration = Duration::from_secs(60);

/// y = 3 x1 - 2 x2 + effect[cat] + noise(0.05), `rows` rows from `seed`.
fn regression_table(rows: usize, seed: u64) -> Table {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let effect = [0.5f32, -1.0, 2.0, 0.0, 1.5];
    let (mut x, mut cat, mut y) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rows {
        let (x1, x2): (f32, f32) = (rng.gen_range(-1.0..1.0), rng.gen_range(-1.0..1.0));
        let c = rng.gen_range(0..5usize);
        x.extend([x1, x2]);
        cat.push(c as f32);
        y.push(3.0 * x1 - 2.0 * x2 + effect[c] + 0.05 * rng.gen_range(-1.0f32..1.0));
    }
    Table::new(
        rows,
        vec![
            Column::new("x", 2, x),
            Column::new("cat", 1, cat),
            Column::new("y", 1, y),
        ],
    )
    .unwrap()
}

const REGRESSION_SPEC: &str = r#"{
  "inputs": [{"name": "x", "type": "float"},
             {"name": "cat", "type": "categorical", "vocabulary": 5}],
  "layers": [{"name": "cat_emb", "type": "embedding", "input": "cat", "dim": 3},
             {"name": "x_bn", "type": "batch_norm", "input": "x"},
             {"name": "all", "type": "concatenate", "inputs": ["x_bn", "cat_emb"]},
             {"name": "hidden", "type": "dense", "input": "all", "units": 32, "activation": "relu", "l2": 1e-5},
             {"name": "y_hat", "type": "dense", "input": "hidden", "units": 1}],
  "outputs": ["y_hat"]
}"#;

/// The regression's config, with `extra` keys (", \"epochs\": 2") replacing the defaults here.
fn config(extra: &str) -> TrainConfig {
    let mut base: serde_json::Value = serde_json::from_str(
        r#"{"label_columns": ["y"], "batch_size": 32, "epochs": 8, "loss": "mse", "metrics": ["mae"],
            "optimizer": {"name": "adam", "learning_rate": 0.01}, "seed": 3}"#,
    )
    .unwrap();
    let extra: serde_json::Value = serde_json::from_str(&format!("{{\"_\": 0 {extra}}}")).unwrap();
    for (key, value) in extra.as_object().unwrap().iter().filter(|(k, _)| *k != "_") {
        base[key] = value.clone();
    }
    TrainConfig::from_json(&base.to_string()).unwrap()
}

/// Runs every remaining epoch.
fn train_to_end(trainer: &mut Trainer, comm: &dyn Collectives) {
    while !trainer.done() {
        trainer.run_epoch(comm).unwrap();
    }
}

fn spec() -> ModelSpec {
    ModelSpec::from_json(REGRESSION_SPEC).unwrap()
}

#[test]
fn regression_reaches_its_threshold_and_predicts() {
    let mut trainer = Trainer::new(
        spec(),
        config(r#", "validation_fraction": 0.2"#),
        regression_table(2000, 1),
        &Single,
        None,
    )
    .unwrap();
    train_to_end(&mut trainer, &Single);
    let history = trainer.history();
    let last = &history[history.len() - 1];
    assert!(
        last.val["loss"] < 0.05,
        "validation mse {} should be below 0.05",
        last.val["loss"]
    );
    assert!(history[0].train["loss"] > last.train["loss"]);

    let test = regression_table(500, 99);
    let predictor = Predictor::new(spec(), &trainer.model_bytes()).unwrap();
    let predicted = predictor.predict(&test).unwrap();
    assert_eq!(predicted[0].name(), "y_hat");
    let truth = test.column("y").unwrap().values();
    let mse: f32 = predicted[0]
        .values()
        .iter()
        .zip(truth)
        .map(|(p, y)| (p - y).powi(2))
        .sum::<f32>()
        / 500.0;
    assert!(mse < 0.05, "held-out mse {mse} should be below 0.05");
}

#[test]
fn classification_reaches_its_accuracy() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (mut f, mut label) = (Vec::new(), Vec::new());
    for i in 0..1500 {
        let class = (i % 2) as f32;
        let sign = class * 2.0 - 1.0;
        f.extend([
            rng.gen_range(-1.0f32..1.0) + 1.5 * sign,
            rng.gen_range(-1.0f32..1.0) - sign,
        ]);
        label.push(class);
    }
    let table = Table::new(
        1500,
        vec![Column::new("f", 2, f), Column::new("label", 1, label)],
    )
    .unwrap();
    let spec = ModelSpec::from_json(
        r#"{"inputs": [{"name": "f", "type": "float"}],
            "layers": [{"name": "h", "type": "dense", "input": "f", "units": 8, "activation": "tanh"},
                       {"name": "d", "type": "dropout", "input": "h", "rate": 0.2},
                       {"name": "p", "type": "dense", "input": "d", "units": 1, "activation": "sigmoid"}],
            "outputs": ["p"]}"#,
    )
    .unwrap();
    let config = TrainConfig::from_json(
        r#"{"label_columns": ["label"], "loss": "binary_crossentropy", "metrics": ["accuracy"], "epochs": 3,
            "optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}, "validation_fraction": 0.25}"#,
    )
    .unwrap();
    let mut trainer = Trainer::new(spec, config, table, &Single, None).unwrap();
    train_to_end(&mut trainer, &Single);
    let accuracy = trainer.history()[2].val["accuracy"];
    assert!(
        accuracy >= 0.95,
        "validation accuracy {accuracy} should reach 0.95"
    );
}

#[test]
fn the_same_seed_gives_the_same_bits() {
    let run = || {
        let mut trainer = Trainer::new(
            spec(),
            config(r#", "epochs": 2"#),
            regression_table(300, 1),
            &Single,
            None,
        )
        .unwrap();
        train_to_end(&mut trainer, &Single);
        trainer.model_bytes()
    };
    assert_eq!(run(), run());
}

/// Trains on `size` ranks (threads, each with its own engine) with uneven
/// shards; returns every rank's final model bytes, or its error.
fn train_ranks(
    size: usize,
    rows: &[usize],
    extra: &'static str,
) -> Vec<horovod_train::Result<Vec<u8>>> {
    let rows = rows.to_vec();
    let threads: Vec<_> = LocalTransport::group(size, WAIT)
        .into_iter()
        .enumerate()
        .map(|(rank, transport)| {
            let rows = rows[rank];
            thread::spawn(move || {
                let engine = Engine::start(transport, EngineConfig::default()).unwrap();
                let comm = EngineCollectives::new(&engine, WAIT);
                let mut trainer = Trainer::new(
                    spec(),
                    config(extra),
                    regression_table(rows, rank as u64),
                    &comm,
                    None,
                )?;
                while !trainer.done() {
                    trainer.run_epoch(&comm)?;
                }
                Ok(trainer.model_bytes())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn ranks_with_uneven_shards_end_with_identical_weights() {
    for (size, rows) in [(2, vec![300, 170]), (3, vec![200, 90, 150])] {
        let models: Vec<Vec<u8>> = train_ranks(size, &rows, r#", "epochs": 2"#)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        for (rank, model) in models.iter().enumerate() {
            assert!(
                model == &models[0],
                "rank {rank} of {size} ended with different weights"
            );
        }
    }
}

#[test]
fn a_rank_without_rows_fails_every_rank() {
    for result in train_ranks(2, &[100, 0], "") {
        let message = result.expect_err("every rank fails").to_string();
        assert!(message.contains("rank 1 has no training rows"), "{message}");
    }
}

#[test]
fn resuming_from_a_checkpoint_equals_training_straight_through() {
    let straight = {
        let mut trainer = Trainer::new(
            spec(),
            config(r#", "epochs": 3"#),
            regression_table(400, 1),
            &Single,
            None,
        )
        .unwrap();
        train_to_end(&mut trainer, &Single);
        (trainer.model_bytes(), trainer.history_json())
    };
    let mut first = Trainer::new(
        spec(),
        config(r#", "epochs": 3"#),
        regression_table(400, 1),
        &Single,
        None,
    )
    .unwrap();
    first.run_epoch(&Single).unwrap();
    let checkpoint = first.checkpoint();
    let mut resumed = Trainer::new(
        spec(),
        config(r#", "epochs": 3"#),
        regression_table(400, 1),
        &Single,
        Some(&checkpoint),
    )
    .unwrap();
    assert_eq!(resumed.history().len(), 1);
    train_to_end(&mut resumed, &Single);
    assert!(
        resumed.model_bytes() == straight.0,
        "resumed weights differ from straight-through training"
    );
    // Seconds differ between runs; everything else in the history matches.
    let losses = |json: &str| {
        let history: serde_json::Value = serde_json::from_str(json).unwrap();
        history
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["train"]["loss"].as_f64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(losses(&resumed.history_json()), losses(&straight.1));
}

#[test]
fn bad_data_is_named_with_counts() {
    let mut table = regression_table(50, 1);
    let err = Trainer::new(
        spec(),
        config(r#", "label_columns": ["sales"]"#),
        table.clone(),
        &Single,
        None,
    );
    let message = err.err().unwrap().to_string();
    assert!(message.contains("column 'sales' is missing"), "{message}");
    assert!(message.contains("\"x\""), "{message}");

    let mut cat = table.column("cat").unwrap().values().to_vec();
    cat[3] = 7.0;
    cat[9] = 2.5;
    table = Table::new(
        50,
        vec![
            table.column("x").unwrap().clone(),
            Column::new("cat", 1, cat),
            table.column("y").unwrap().clone(),
        ],
    )
    .unwrap();
    let message = Trainer::new(spec(), config(""), table, &Single, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        message.contains("categorical column 'cat' has 2 values that are not integers in [0, 5)"),
        "{message}"
    );
}

#[test]
fn the_rossmann_model_builds_with_its_parameter_count() {
    let spec = ModelSpec::from_json(include_str!(
        "../../../examples/rossmann/rossmann-model.json"
    ))
    .unwrap();
    assert_eq!(spec.input_columns().len(), 36);
    let mut columns: Vec<Column> = spec
        .input_columns()
        .into_iter()
        .map(|c| Column::new(c, 1, vec![0.0; 4]))
        .collect();
    columns.push(Column::new("Sales", 1, vec![1.0; 4]));
    let config =
        TrainConfig::from_json(r#"{"label_columns": ["Sales"], "loss": "mae", "batch_size": 4}"#)
            .unwrap();
    let trainer = Trainer::new(
        spec.clone(),
        config,
        Table::new(4, columns).unwrap(),
        &Single,
        None,
    )
    .unwrap();
    let predictor = Predictor::new(spec, &trainer.model_bytes()).unwrap();
    assert_eq!(predictor.outputs(), vec![("sales".to_string(), 1)]);
    // Embeddings: 10 x (sum of the 18 vocabularies = 1 380) = 13 800. Batch norm over the
    // 18 continuous columns: gamma and beta 36 trainable, moving mean and variance 36 not.
    // Dense 198 (= 18 x 10 + 18) -1000-1000-1000-500-1 with biases: 198 000 + 1 000
    // + 1 001 000 + 1 001 000 + 500 500 + 501 = 2 702 001. Trainable: 2 715 837.
    assert_eq!(predictor.parameter_counts(), (2_715_837, 36));
}

#[test]
fn spec_errors_name_the_layer_and_field() {
    let err = |json: &str| ModelSpec::from_json(json).err().unwrap().to_string();
    let base = |layers: &str| {
        format!(
            r#"{{"inputs": [{{"name": "x", "type": "float"}}], "layers": [{layers}], "outputs": ["h"]}}"#
        )
    };
    assert!(err(&base(
        r#"{"name": "h", "type": "dense", "input": "y", "units": 3}"#
    ))
    .contains("layer 'h': reads 'y', which is not defined before it"));
    assert!(
        err(&base(r#"{"name": "h", "type": "dense", "input": "x"}"#))
            .contains("layer 'h': needs \"units\" > 0")
    );
    assert!(
        err(&base(r#"{"name": "h", "type": "conv2d", "input": "x"}"#))
            .contains("layer 'h': unknown type 'conv2d'")
    );
    assert!(err(&base(
        r#"{"name": "h", "type": "dense", "input": "x", "units": 2, "activation": "gelu"}"#
    ))
    .contains("unknown activation 'gelu'"));
    assert!(err(&base(
        r#"{"name": "h", "type": "embedding", "input": "x", "dim": 2}"#
    ))
    .contains("an embedding reads a categorical input, not 'x'"));
}

/// The regression model with dropout before its output, so resuming must
/// also continue the dropout masks where they were.
const DROPOUT_SPEC: &str = r#"{
  "inputs": [{"name": "x", "type": "float"},
             {"name": "cat", "type": "categorical", "vocabulary": 5}],
  "layers": [{"name": "cat_emb", "type": "embedding", "input": "cat", "dim": 3},
             {"name": "x_bn", "type": "batch_norm", "input": "x"},
             {"name": "all", "type": "concatenate", "inputs": ["x_bn", "cat_emb"]},
             {"name": "hidden", "type": "dense", "input": "all", "units": 16, "activation": "relu"},
             {"name": "drop", "type": "dropout", "input": "hidden", "rate": 0.3},
             {"name": "y_hat", "type": "dense", "input": "drop", "units": 1}],
  "outputs": ["y_hat"]
}"#;

/// Adds `is_val`: every 5th row on rank 0, none on rank 1, every 4th on others.
fn with_validation_column(table: Table, rank: usize) -> Table {
    let rows = table.rows();
    let every = match rank {
        0 => Some(5),
        1 => None,
        _ => Some(4),
    };
    let is_val = (0..rows)
        .map(|r| every.map_or(0.0, |n| (r % n == 0) as u8 as f32))
        .collect();
    let mut columns = table.columns().to_vec();
    columns.push(Column::new("is_val", 1, is_val));
    Table::new(rows, columns).unwrap()
}

/// What a rank ends with: the model, its last checkpoint and its history.
type RankEnd = (Vec<u8>, Vec<u8>, String);

/// Runs `size` ranks of the dropout model for at most `epochs` epochs each,
/// starting from `resume` (given to every rank; only rank 0's counts).
fn run_ranks(
    size: usize,
    rows: &[usize],
    extra: &'static str,
    resume: Option<Vec<u8>>,
    epochs: usize,
) -> Vec<horovod_train::Result<RankEnd>> {
    let threads: Vec<_> = LocalTransport::group(size, WAIT)
        .into_iter()
        .enumerate()
        .map(|(rank, transport)| {
            let (rows, resume) = (rows[rank], resume.clone());
            thread::spawn(move || {
                let engine = Engine::start(transport, EngineConfig::default()).unwrap();
                let comm = EngineCollectives::new(&engine, WAIT);
                // Only rank 0's checkpoint counts: the others get bytes that are none.
                let resume = resume.map(|bytes| {
                    if rank == 0 {
                        bytes
                    } else {
                        b"not a checkpoint".to_vec()
                    }
                });
                let mut trainer = Trainer::new(
                    ModelSpec::from_json(DROPOUT_SPEC).unwrap(),
                    config(extra),
                    with_validation_column(regression_table(rows, 10 + rank as u64), rank),
                    &comm,
                    resume.as_deref(),
                )?;
                for _ in 0..epochs {
                    if trainer.done() {
                        break;
                    }
                    trainer.run_epoch(&comm)?;
                }
                Ok((
                    trainer.model_bytes(),
                    trainer.checkpoint(),
                    trainer.history_json(),
                ))
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Train and validation losses of a history, per epoch (seconds differ between runs).
fn losses(history: &str) -> Vec<(f64, f64)> {
    let history: serde_json::Value = serde_json::from_str(history).unwrap();
    history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["train"]["loss"].as_f64().unwrap(),
                r["val"]["loss"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn resuming_three_ranks_with_dropout_and_validation_equals_training_straight_through() {
    let extra = r#", "epochs": 3, "validation_fraction": 0.2, "batch_size": 16"#;
    let rows = [150, 70, 110];
    let straight: Vec<RankEnd> = run_ranks(3, &rows, extra, None, 3)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let first: Vec<RankEnd> = run_ranks(3, &rows, extra, None, 1)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let resumed: Vec<RankEnd> = run_ranks(3, &rows, extra, Some(first[0].1.clone()), 3)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for rank in 0..3 {
        assert!(
            resumed[rank].0 == straight[0].0,
            "rank {rank}: resumed weights differ from straight-through training"
        );
        assert_eq!(losses(&resumed[rank].2), losses(&straight[rank].2));
        assert_eq!(losses(&resumed[rank].2).len(), 3);
    }
}

#[test]
fn a_checkpoint_with_every_epoch_done_is_done_at_once() {
    let mut trainer = Trainer::new(
        spec(),
        config(r#", "epochs": 2"#),
        regression_table(100, 1),
        &Single,
        None,
    )
    .unwrap();
    train_to_end(&mut trainer, &Single);
    let checkpoint = trainer.checkpoint();
    let again = |epochs: &'static str| {
        Trainer::new(
            spec(),
            config(epochs),
            regression_table(100, 1),
            &Single,
            Some(&checkpoint),
        )
        .unwrap()
    };
    assert!(again(r#", "epochs": 2"#).done());
    assert!(again(r#", "epochs": 1"#).done());
    // More epochs than the checkpoint has: only the remaining one runs.
    let mut more = again(r#", "epochs": 3"#);
    assert!(!more.done());
    assert_eq!(more.run_epoch(&Single).unwrap().epoch, 2);
    assert!(more.done());
}

#[test]
fn validation_without_validation_rows_fails_every_rank() {
    // A validation column that is zero everywhere: no rank has validation rows.
    let table = regression_table(60, 1);
    let mut columns = table.columns().to_vec();
    columns.push(Column::new("is_val", 1, vec![0.0; 60]));
    let table = Table::new(60, columns).unwrap();
    let message = Trainer::new(
        spec(),
        config(r#", "validation_column": "is_val""#),
        table,
        &Single,
        None,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(message.contains("no rank has validation rows"), "{message}");
    // Rank 1 without validation rows is fine as long as another rank has some.
    let results = run_ranks(
        2,
        &[200, 30],
        r#", "epochs": 1, "validation_column": "is_val""#,
        None,
        1,
    );
    for result in results {
        let (_, _, history) = result.unwrap();
        assert!(losses(&history)[0].1.is_finite());
    }
}

#[test]
fn nan_values_label_widths_and_class_indices_are_named_with_counts() {
    let table = regression_table(40, 1);
    let replace = |name: &str, column: Column| {
        let columns = table
            .columns()
            .iter()
            .map(|c| {
                if c.name() == name {
                    column.clone()
                } else {
                    c.clone()
                }
            })
            .collect();
        Table::new(40, columns).unwrap()
    };
    let fails = |config: TrainConfig, table: Table| {
        Trainer::new(spec(), config, table, &Single, None)
            .err()
            .expect("the data is rejected")
            .to_string()
    };
    let mut x = table.column("x").unwrap().values().to_vec();
    x[0] = f32::NAN;
    x[7] = f32::NAN;
    x[11] = f32::INFINITY;
    let message = fails(config(""), replace("x", Column::new("x", 2, x)));
    assert!(
        message.contains("column 'x' has 3 NaN or infinite values"),
        "{message}"
    );
    let mut y = table.column("y").unwrap().values().to_vec();
    y[5] = f32::NAN;
    let message = fails(config(""), replace("y", Column::new("y", 1, y)));
    assert!(
        message.contains("column 'y' has 1 NaN or infinite values"),
        "{message}"
    );
    // A 2-wide label for a 1-wide output.
    let message = fails(config(""), replace("y", Column::new("y", 2, vec![0.0; 80])));
    assert!(
        message.contains(
            "label column 'y' has 2 values per row; output 'y_hat' with loss mse needs 1"
        ),
        "{message}"
    );
    // Sparse classes of a 1-wide output: only 0 is a class; 3 rows say 1, one says -1.
    let classes: Vec<f32> = (0..40)
        .map(|i| match i {
            1..=3 => 1.0,
            4 => -1.0,
            _ => 0.0,
        })
        .collect();
    let message = fails(
        config(r#", "loss": "sparse_categorical_crossentropy", "metrics": []"#),
        replace("y", Column::new("y", 1, classes)),
    );
    assert!(
        message.contains("label column 'y' has 4 values that are not class indices in [0, 1)"),
        "{message}"
    );
    // A monitor that no epoch would report: before training, not after the first epoch.
    for (extra, monitor) in [
        (r#", "monitor": "val_mae""#, "val_mae"),
        (r#", "monitor": "accuracy""#, "accuracy"),
    ] {
        let message = fails(config(extra), table.clone());
        assert!(
            message.contains(&format!(
                "monitor '{monitor}' is not a reported metric (loss, mae;"
            )),
            "{message}"
        );
    }
    assert!(Trainer::new(
        spec(),
        config(r#", "monitor": "val_mae", "validation_fraction": 0.2"#),
        table.clone(),
        &Single,
        None
    )
    .is_ok());
    let message = TrainConfig::from_json(r#"{"label_columns": ["y"], "steps_per_epoch": 0}"#)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("steps_per_epoch must be at least 1"),
        "{message}"
    );
    let message = TrainConfig::from_json(r#"{"label_columns": ["y"], "learning_rate": 0.1}"#)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("unknown field `learning_rate`"),
        "{message}"
    );
}

/// Three classes around (2, 0), (-1, 1.7) and (-1, -1.7), with a categorical
/// feature that tells the class apart for half the rows; the labels as class
/// indices and as one-hot rows.
fn three_class_table(rows: usize) -> Table {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let centers = [(2.0f32, 0.0f32), (-1.0, 1.7), (-1.0, -1.7)];
    let (mut f, mut hint, mut class, mut onehot) = (vec![], vec![], vec![], vec![]);
    for i in 0..rows {
        let c = i % 3;
        f.extend([
            centers[c].0 + rng.gen_range(-0.9f32..0.9),
            centers[c].1 + rng.gen_range(-0.9f32..0.9),
        ]);
        // Category c + 1 for half the rows, 0 ("unknown") for the rest.
        hint.push(if rng.gen_bool(0.5) {
            c as f32 + 1.0
        } else {
            0.0
        });
        class.push(c as f32);
        onehot.extend((0..3).map(|k| (k == c) as u8 as f32));
    }
    Table::new(
        rows,
        vec![
            Column::new("f", 2, f),
            Column::new("hint", 1, hint),
            Column::new("class", 1, class),
            Column::new("onehot", 3, onehot),
        ],
    )
    .unwrap()
}

#[test]
fn softmax_classification_reaches_its_accuracy_with_both_crossentropies() {
    let spec = r#"{"inputs": [{"name": "f", "type": "float"},
                             {"name": "hint", "type": "categorical", "vocabulary": 4}],
        "layers": [{"name": "hint_emb", "type": "embedding", "input": "hint", "dim": 2},
                   {"name": "all", "type": "concatenate", "inputs": ["f", "hint_emb"]},
                   {"name": "h", "type": "dense", "input": "all", "units": 16, "activation": "relu"},
                   {"name": "p", "type": "dense", "input": "h", "units": 3, "activation": "softmax"}],
        "outputs": ["p"]}"#;
    for (label, loss) in [
        ("class", "sparse_categorical_crossentropy"),
        ("onehot", "categorical_crossentropy"),
    ] {
        let config = TrainConfig::from_json(&format!(
            r#"{{"label_columns": ["{label}"], "loss": "{loss}", "metrics": ["accuracy", "{loss}"],
                "epochs": 4, "optimizer": {{"name": "adam", "learning_rate": 0.01}},
                "validation_fraction": 0.25, "seed": 2}}"#
        ))
        .unwrap();
        let mut trainer = Trainer::new(
            ModelSpec::from_json(spec).unwrap(),
            config,
            three_class_table(1200),
            &Single,
            None,
        )
        .unwrap();
        train_to_end(&mut trainer, &Single);
        let last = trainer.history().last().unwrap();
        assert!(
            last.val["accuracy"] >= 0.95,
            "{loss}: validation accuracy {} should reach 0.95",
            last.val["accuracy"]
        );
        // The loss as a metric is the reported loss itself.
        assert!((last.val[loss] - last.val["loss"]).abs() < 1e-12);
        assert!(trainer.history()[0].train["loss"] > last.train["loss"]);
    }
}

#[test]
fn the_predictor_names_missing_and_misshaped_columns() {
    let trainer = Trainer::new(spec(), config(""), regression_table(40, 1), &Single, None).unwrap();
    let predictor = Predictor::new(spec(), &trainer.model_bytes()).unwrap();
    let table = regression_table(10, 2);
    let without_cat = Table::new(
        10,
        vec![
            table.column("x").unwrap().clone(),
            table.column("y").unwrap().clone(),
        ],
    )
    .unwrap();
    let message = predictor.predict(&without_cat).unwrap_err().to_string();
    assert!(
        message.contains("column 'cat' is missing; the data has [\"x\", \"y\"]"),
        "{message}"
    );
    let narrow_x = Table::new(
        10,
        vec![
            Column::new("x", 1, vec![0.0; 10]),
            table.column("cat").unwrap().clone(),
        ],
    )
    .unwrap();
    let message = predictor.predict(&narrow_x).unwrap_err().to_string();
    assert!(
        message.contains("column 'x' has 1 values per row; the model was trained on 2"),
        "{message}"
    );
    // Labels are not needed to predict; another spec's weights are refused.
    assert_eq!(
        predictor.predict(&features_only(&table)).unwrap()[0]
            .values()
            .len(),
        10
    );
    let other =
        ModelSpec::from_json(&REGRESSION_SPEC.replace("\"units\": 32", "\"units\": 31")).unwrap();
    let message = Predictor::new(other, &trainer.model_bytes())
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("different model spec"), "{message}");
}

/// The features of `table` without its label.
fn features_only(table: &Table) -> Table {
    Table::new(
        table.rows(),
        vec![
            table.column("x").unwrap().clone(),
            table.column("cat").unwrap().clone(),
        ],
    )
    .unwrap()
}

#[test]
fn the_predictor_names_categories_outside_the_vocabulary() {
    let trainer = Trainer::new(spec(), config(""), regression_table(40, 1), &Single, None).unwrap();
    let predictor = Predictor::new(spec(), &trainer.model_bytes()).unwrap();
    let table = regression_table(10, 2);
    let mut cat = table.column("cat").unwrap().values().to_vec();
    cat[2] = 7.0;
    cat[4] = -1.0;
    cat[5] = f32::NAN;
    let table = Table::new(
        10,
        vec![
            table.column("x").unwrap().clone(),
            Column::new("cat", 1, cat),
        ],
    )
    .unwrap();
    let message = predictor.predict(&table).unwrap_err().to_string();
    assert!(
        message.contains("categorical column 'cat' has 3 values that are not integers in [0, 5)"),
        "{message}"
    );
}

const TWO_HEADS_SPEC: &str = r#"{
  "inputs": [{"name": "x", "type": "float"},
             {"name": "cat", "type": "categorical", "vocabulary": 5}],
  "layers": [{"name": "cat_emb", "type": "embedding", "input": "cat", "dim": 3},
             {"name": "all", "type": "concatenate", "inputs": ["x", "cat_emb"]},
             {"name": "hidden", "type": "dense", "input": "all", "units": 16, "activation": "relu"},
             {"name": "y_hat", "type": "dense", "input": "hidden", "units": 1},
             {"name": "z_hat", "type": "dense", "input": "hidden", "units": 1}],
  "outputs": ["y_hat", "z_hat"]
}"#;

/// The regression table with a second label, z = -y / 2.
fn two_label_table(rows: usize) -> Table {
    let table = regression_table(rows, 5);
    let column = |name: &str| table.column(name).unwrap().values().to_vec();
    let z = column("y").iter().map(|y| -y / 2.0).collect();
    Table::new(
        rows,
        vec![
            Column::new("x", 2, column("x")),
            Column::new("cat", 1, column("cat")),
            Column::new("y", 1, column("y")),
            Column::new("z", 1, z),
        ],
    )
    .unwrap()
}

#[test]
fn several_outputs_report_each_outputs_loss_and_metrics() {
    let spec = || ModelSpec::from_json(TWO_HEADS_SPEC).unwrap();
    let two_heads = |extra: &str| {
        config(&format!(
            r#", "label_columns": ["y", "z"], "epochs": 3, "validation_fraction": 0.2 {extra}"#
        ))
    };
    let mut trainer = Trainer::new(
        spec(),
        two_heads(r#", "monitor": "val_z_hat_mae""#),
        two_label_table(800),
        &Single,
        None,
    )
    .unwrap();
    train_to_end(&mut trainer, &Single);
    let last = &trainer.history()[2];
    for values in [&last.train, &last.val] {
        let names: Vec<&str> = values.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["loss", "y_hat_loss", "y_hat_mae", "z_hat_loss", "z_hat_mae"]
        );
        let total = values["y_hat_loss"] + values["z_hat_loss"];
        assert!((values["loss"] - total).abs() < 1e-9, "{values:?}");
        // z is half of y's scale: its error is smaller.
        assert!(values["z_hat_mae"] < values["y_hat_mae"], "{values:?}");
    }
    let error = Trainer::new(
        spec(),
        two_heads(r#", "monitor": "val_mae""#),
        two_label_table(100),
        &Single,
        None,
    )
    .err()
    .unwrap();
    assert!(
        error.to_string().contains(
            "monitor 'val_mae' is not a reported metric (loss, y_hat_loss, y_hat_mae, z_hat_loss, z_hat_mae"
        ),
        "{error}"
    );
}
