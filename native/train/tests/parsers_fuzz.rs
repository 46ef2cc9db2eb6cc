//! Property tests of what the trainer parses from users and files: model
//! specs (JSON), saved models and checkpoints (bytes). Whatever they hold,
//! parsing returns a value or an error naming what was wrong; it never
//! panics nor allocates by a size it read.

use horovod_data::{Column, Table};
use horovod_train::{Error, ModelSpec, Predictor, Single, TrainConfig, Trainer};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Sizes that break arithmetic: zero, small, and near the limits.
fn size() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        (1u64..5).prop_map(|n| json!(n)),
        Just(json!(1u64 << 32)),
        Just(json!(1u64 << 62)),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        Just(json!(2.5)),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![Just("a"), Just("b"), Just("h1"), Just("h2"), Just("h3")].prop_map(String::from)
}

fn input() -> impl Strategy<Value = Value> {
    (
        name(),
        prop_oneof![Just("float"), Just("categorical"), Just("text")],
        proptest::collection::vec(name(), 0..3),
        proptest::option::of(size()),
    )
        .prop_map(|(name, kind, columns, vocabulary)| {
            let mut input = json!({"name": name, "type": kind, "columns": columns});
            if let Some(vocabulary) = vocabulary {
                input["vocabulary"] = vocabulary;
            }
            input
        })
}

fn layer() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        Just("dense"),
        Just("embedding"),
        Just("batch_norm"),
        Just("dropout"),
        Just("concatenate"),
        Just("flatten"),
        Just("reshape"),
        Just("activation"),
        Just("conv"),
    ];
    let activation = prop_oneof![
        Just("relu"),
        Just("softmax"),
        Just("scaled_sigmoid"),
        Just("swish")
    ];
    (
        (name(), kind, proptest::option::of(name())),
        proptest::collection::vec(name(), 0..3),
        (size(), size(), proptest::collection::vec(size(), 0..4)),
        (
            proptest::option::of(activation),
            proptest::option::of(-2.0f64..2.0),
        ),
    )
        .prop_map(
            |((name, kind, input), inputs, (units, dim, shape), (activation, number))| {
                let mut layer = json!({"name": name, "type": kind, "inputs": inputs,
                    "units": units, "dim": dim, "shape": shape});
                if let Some(input) = input {
                    layer["input"] = json!(input);
                }
                if let Some(activation) = activation {
                    layer["activation"] = json!(activation);
                }
                if let Some(number) = number {
                    for field in ["scale", "rate", "l2"] {
                        layer[field] = json!(number);
                    }
                }
                layer
            },
        )
}

fn spec_json() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(input(), 0..3),
        proptest::collection::vec(layer(), 0..5),
        proptest::collection::vec(name(), 0..3),
    )
        .prop_map(|(inputs, layers, outputs)| {
            json!({"inputs": inputs, "layers": layers, "outputs": outputs})
        })
}

/// A spec error with a message.
fn is_spec_error(error: &Error) -> bool {
    matches!(error, Error::Spec(why) if !why.is_empty())
}

/// A checkpoint error with a message.
fn is_checkpoint_error(error: &Error) -> bool {
    matches!(error, Error::Checkpoint(why) if !why.is_empty())
}

/// The small model the file tests save and load.
const SPEC: &str = r#"{"inputs": [{"name": "x", "type": "float"}],
  "layers": [{"name": "h", "type": "dense", "input": "x", "units": 3, "activation": "relu"},
             {"name": "y_hat", "type": "dense", "input": "h", "units": 1}],
  "outputs": ["y_hat"]}"#;

fn trainer() -> Trainer {
    let rows = 8;
    let x: Vec<f32> = (0..2 * rows).map(|i| i as f32 / 8.0).collect();
    let y: Vec<f32> = (0..rows).map(|i| i as f32).collect();
    let table = Table::new(rows, vec![Column::new("x", 2, x), Column::new("y", 1, y)]).unwrap();
    let config = TrainConfig::from_json(
        r#"{"label_columns": ["y"], "batch_size": 4, "optimizer": {"name": "adam"}}"#,
    )
    .unwrap();
    let spec = ModelSpec::from_json(SPEC).unwrap();
    let mut trainer = Trainer::new(spec, config, table, &Single, None).unwrap();
    trainer.run_epoch(&Single).unwrap();
    trainer
}

/// A blob as the trainer writes them, from its parts.
fn blob(meta: &Value, arrays: &[(&str, &[f32])]) -> Vec<u8> {
    let lens: Vec<(&str, usize)> = arrays.iter().map(|(n, a)| (*n, a.len())).collect();
    let header = serde_json::to_vec(&json!({"meta": meta, "arrays": lens})).unwrap();
    let mut out = b"HVRSBLOB".to_vec();
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for (_, array) in arrays {
        for v in *array {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_text_parses_or_is_a_spec_error(text in "\\PC{0,64}") {
        if let Err(error) = ModelSpec::from_json(&text) {
            prop_assert!(is_spec_error(&error), "{}", error);
        }
    }

    #[test]
    fn any_spec_parses_or_names_the_problem(spec in spec_json()) {
        match ModelSpec::from_json(&spec.to_string()) {
            Ok(parsed) => {
                // What parses round trips and plans for any column widths.
                prop_assert_eq!(&ModelSpec::from_json(&parsed.to_json()).unwrap(), &parsed);
                for width in [1, 7, usize::MAX] {
                    if let Err(error) = parsed.plan_with(&|_| width) {
                        prop_assert!(is_spec_error(&error), "{}", error);
                    }
                }
            }
            Err(error) => prop_assert!(is_spec_error(&error), "{}", error),
        }
    }

    #[test]
    fn overflowing_shapes_are_spec_errors(
        huge in prop_oneof![Just(u64::MAX), Just(1u64 << 63), (1u64 << 62) + 1..=u64::MAX],
        case in 0..3usize,
    ) {
        let spec = match case {
            // Two huge dense layers side by side.
            0 => json!({"inputs": [{"name": "a", "type": "float"}],
                "layers": [{"name": "h1", "type": "dense", "input": "a", "units": huge},
                           {"name": "h2", "type": "dense", "input": "a", "units": huge},
                           {"name": "h3", "type": "concatenate", "inputs": ["h1", "h2", "h1", "h2"]}],
                "outputs": ["h3"]}),
            // A huge embedding of four columns.
            1 => json!({"inputs": [{"name": "a", "type": "categorical", "columns": ["a", "b", "c", "d"],
                                    "vocabulary": 3}],
                "layers": [{"name": "h1", "type": "embedding", "input": "a", "dim": huge}],
                "outputs": ["h1"]}),
            // A reshape whose shape's product overflows.
            _ => json!({"inputs": [{"name": "a", "type": "float"}],
                "layers": [{"name": "h1", "type": "reshape", "input": "a", "shape": [huge, huge, 2]}],
                "outputs": ["h1"]}),
        };
        let error = ModelSpec::from_json(&spec.to_string()).unwrap_err();
        prop_assert!(is_spec_error(&error), "{}", error);
        let message = error.to_string();
        prop_assert!(message.contains("more values than fit in memory"), "{}", message);
    }

    #[test]
    fn saved_models_load_and_damaged_ones_are_refused(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        let trainer = trainer();
        let spec = ModelSpec::from_json(SPEC).unwrap();
        let bytes = trainer.model_bytes();
        prop_assert!(Predictor::new(spec.clone(), &bytes).is_ok());
        let mut damaged = bytes.clone();
        for (at, byte) in flips {
            let at = at % damaged.len();
            damaged[at] ^= byte.max(1);
        }
        if let Err(error) = Predictor::new(spec, &damaged) {
            prop_assert!(is_checkpoint_error(&error) || is_spec_error(&error), "{}", error);
        }
    }

    #[test]
    fn damaged_checkpoints_are_refused(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        let checkpoint = trainer().checkpoint();
        let mut damaged = checkpoint.clone();
        for (at, byte) in flips {
            let at = at % damaged.len();
            damaged[at] ^= byte.max(1);
        }
        let table = Table::new(1, vec![Column::new("x", 2, vec![0.0; 2]), Column::new("y", 1, vec![0.0])]).unwrap();
        let config = TrainConfig::from_json(
            r#"{"label_columns": ["y"], "batch_size": 4, "optimizer": {"name": "adam"}}"#,
        )
        .unwrap();
        let spec = ModelSpec::from_json(SPEC).unwrap();
        if let Err(error) = Trainer::new(spec, config, table, &Single, Some(&damaged)) {
            prop_assert!(is_checkpoint_error(&error), "{}", error);
        }
    }

    #[test]
    fn huge_saved_column_widths_are_refused_before_allocating(
        width in prop_oneof![Just(u64::MAX), Just(1u64 << 40), Just(u64::from(u32::MAX)), 3u64..1 << 50],
    ) {
        let spec = ModelSpec::from_json(SPEC).unwrap();
        let meta = json!({"kind": "horovod-rs model", "spec": spec.to_json(),
            "column_widths": {"x": width}});
        let error = Predictor::new(spec, &blob(&meta, &[("h/kernel", &[0.0; 6])])).err().unwrap();
        prop_assert!(is_checkpoint_error(&error) || is_spec_error(&error), "{}", error);
        let message = error.to_string();
        prop_assert!(message.contains("values"), "{}", message);
    }
}

#[test]
fn every_truncation_of_a_saved_model_or_checkpoint_is_refused() {
    let trainer = trainer();
    let spec = ModelSpec::from_json(SPEC).unwrap();
    let bytes = trainer.model_bytes();
    for cut in 0..bytes.len() {
        let error = Predictor::new(spec.clone(), &bytes[..cut]).err().unwrap();
        assert!(is_checkpoint_error(&error), "cut {cut}: {error}");
    }
}

#[test]
fn checkpoints_with_short_optimizer_or_best_arrays_are_refused() {
    let checkpoint = trainer().checkpoint();
    let decode = |bytes: &[u8]| -> (Value, Vec<(String, Vec<f32>)>) {
        let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&bytes[16..16 + len]).unwrap();
        let mut offset = 16 + len;
        let arrays = header["arrays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let n = a[1].as_u64().unwrap() as usize;
                let values = bytes[offset..offset + 4 * n]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                offset += 4 * n;
                (a[0].as_str().unwrap().to_string(), values)
            })
            .collect();
        (header["meta"].clone(), arrays)
    };
    let (meta, arrays) = decode(&checkpoint);
    for prefix in ["first/", "second/", "best/"] {
        let mut meta = meta.clone();
        meta["best_value"] = json!(0.5);
        let mut arrays = arrays.clone();
        let has_best = arrays.iter().any(|(n, _)| n.starts_with("best/"));
        if prefix == "best/" && !has_best {
            // One best array per parameter, the first one short.
            let params: Vec<(String, Vec<f32>)> = arrays
                .iter()
                .filter_map(|(n, v)| {
                    n.strip_prefix("param/")
                        .map(|p| (format!("best/{p}"), v.clone()))
                })
                .collect();
            arrays.extend(params);
        }
        let short = arrays
            .iter_mut()
            .find(|(n, _)| n.starts_with(prefix))
            .unwrap();
        short.1.pop();
        let borrowed: Vec<(&str, &[f32])> =
            arrays.iter().map(|(n, v)| (n.as_str(), &v[..])).collect();
        let table = Table::new(
            1,
            vec![
                Column::new("x", 2, vec![0.0; 2]),
                Column::new("y", 1, vec![0.0]),
            ],
        )
        .unwrap();
        let config = TrainConfig::from_json(
            r#"{"label_columns": ["y"], "batch_size": 4, "optimizer": {"name": "adam"}}"#,
        )
        .unwrap();
        let spec = ModelSpec::from_json(SPEC).unwrap();
        let error = Trainer::new(spec, config, table, &Single, Some(&blob(&meta, &borrowed)))
            .err()
            .unwrap();
        assert!(is_checkpoint_error(&error), "{prefix}: {error}");
    }
}
