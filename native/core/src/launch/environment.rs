//! Horovod's environment variables, as fields of a [`super::RankSpec`]:
//! the one place that reads them, for every edge (the JVM's executors get
//! them through `spark.executorEnv.*`, Python processes from their launcher).
//!
//! A variable only fills a field the spec's JSON leaves out.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::tls::TLS_VARIABLE;

/// The share of the collective timeout after which, unless
/// `HOROVOD_STALL_SHUTDOWN_TIME_SECONDS` or the spec says otherwise, the
/// stall check fails a tensor some ranks never submitted: before a wait
/// times out knowing no ranks, the stall check names them.
const STALL_SHARE_OF_COLLECTIVE_TIMEOUT: f64 = 0.8;

/// One variable and the spec field it fills.
struct Knob {
    variable: &'static str,
    /// The field's path in the spec's JSON.
    field: &'static [&'static str],
    /// The field's value, or `None` when the variable's value means "unset".
    parse: fn(&str) -> std::result::Result<Option<Value>, &'static str>,
}

const KNOBS: &[Knob] = &[
    Knob {
        variable: "HOROVOD_RS_CONNECT_TIMEOUT_SECONDS",
        field: &["connect_timeout_ms"],
        parse: positive_seconds,
    },
    Knob {
        variable: "HOROVOD_RS_TIMEOUT_SECONDS",
        field: &["collective_timeout_ms"],
        parse: positive_seconds,
    },
    Knob {
        variable: "HOROVOD_HIERARCHICAL_ALLREDUCE",
        field: &["hierarchical_allreduce"],
        // Only an explicit "off" turns it off: on several hosts it is the faster allreduce.
        parse: |value| {
            Ok(Some(Value::Bool(!matches!(
                lower(value).as_str(),
                "0" | "false"
            ))))
        },
    },
    Knob {
        variable: TLS_VARIABLE,
        field: &["tls"],
        parse: |value| match tls_switch(value) {
            Some(on) => Ok(Some(Value::Bool(on))),
            None => Err("expected 1 or 0 (true or false)"),
        },
    },
    Knob {
        variable: "HOROVOD_FUSION_THRESHOLD",
        field: &["engine", "fusion_threshold_bytes"],
        parse: count,
    },
    Knob {
        variable: "HOROVOD_CYCLE_TIME",
        field: &["engine", "cycle_time_ms"],
        // Milliseconds, as in Horovod; the engine cycles at most once per millisecond.
        parse: |value| match number(value) {
            Some(ms) if ms >= 0.0 => Ok(Some(Value::from((ms as u64).max(1)))),
            _ => Err("expected a number of milliseconds"),
        },
    },
    Knob {
        variable: "HOROVOD_STALL_CHECK_TIME_SECONDS",
        field: &["engine", "stall_warning_ms"],
        parse: seconds,
    },
    Knob {
        variable: "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
        field: &["engine", "stall_timeout_ms"],
        // Horovod's 0 means "never"; ours derives a bound from the collective timeout instead.
        parse: |value| Ok(seconds(value)?.filter(|ms| ms.as_u64() != Some(0))),
    },
    Knob {
        variable: "HOROVOD_CACHE_CAPACITY",
        field: &["engine", "cache_capacity"],
        parse: count,
    },
];

/// The variables a rank spec is filled from: what a driver hands its ranks
/// from its own environment, as Horovod does.
pub fn variables() -> impl Iterator<Item = &'static str> {
    KNOBS.iter().map(|knob| knob.variable)
}

/// Whether `HOROVOD_RS_TLS`'s `value` turns encryption on: `1`, `true`,
/// `yes` or `on` do; unset, empty, `0`, `false`, `no` or `off` do not;
/// anything else is refused, naming the variable.
pub fn tls_setting(value: Option<&str>) -> Result<bool> {
    match value {
        None => Ok(false),
        Some(value) => tls_switch(value).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{TLS_VARIABLE}={value:?}: expected 1 or 0 (true or false)"
            ))
        }),
    }
}

fn tls_switch(value: &str) -> Option<bool> {
    match lower(value).as_str() {
        "" | "0" | "false" | "no" | "off" => Some(false),
        "1" | "true" | "yes" | "on" => Some(true),
        _ => None,
    }
}

/// Fills the fields `spec` (a rank spec's JSON) leaves out from the
/// variables `variable` looks up, then the stall timeout from the
/// collective timeout.
pub(super) fn fill_missing(
    spec: &mut Value,
    variable: impl Fn(&str) -> Option<String>,
) -> Result<()> {
    let fields = spec
        .as_object_mut()
        .ok_or_else(|| Error::InvalidArgument("rank spec: expected a JSON object".into()))?;
    for knob in KNOBS {
        let Some(value) = variable(knob.variable) else {
            continue;
        };
        let parsed = (knob.parse)(&value)
            .map_err(|why| Error::InvalidArgument(format!("{}={value:?}: {why}", knob.variable)))?;
        if let Some(parsed) = parsed {
            let (name, parents) = knob.field.split_last().expect("every knob names a field");
            let parent = object_at(fields, parents)?;
            parent.entry(*name).or_insert(parsed);
        }
    }
    let collective_ms = fields
        .get("collective_timeout_ms")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| super::default_collective_timeout().as_millis() as u64);
    let stall_ms = (collective_ms as f64 * STALL_SHARE_OF_COLLECTIVE_TIMEOUT) as u64;
    object_at(fields, &["engine"])?
        .entry("stall_timeout_ms")
        .or_insert(Value::from(stall_ms));
    Ok(())
}

/// The object at `path` under `fields`, created empty where missing.
fn object_at<'a>(
    mut fields: &'a mut Map<String, Value>,
    path: &[&str],
) -> Result<&'a mut Map<String, Value>> {
    for name in path {
        fields = fields
            .entry(*name)
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or_else(|| {
                Error::InvalidArgument(format!("rank spec: `{name}` must be an object"))
            })?;
    }
    Ok(fields)
}

fn lower(value: &str) -> String {
    value.trim().to_ascii_lowercase()
}

fn number(value: &str) -> Option<f64> {
    value.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

fn count(value: &str) -> std::result::Result<Option<Value>, &'static str> {
    value
        .trim()
        .parse::<u64>()
        .map(|n| Some(Value::from(n)))
        .map_err(|_| "expected a non-negative integer")
}

fn seconds(value: &str) -> std::result::Result<Option<Value>, &'static str> {
    match number(value) {
        Some(s) if s >= 0.0 => Ok(Some(Value::from((s * 1000.0) as u64))),
        _ => Err("expected a non-negative number of seconds"),
    }
}

fn positive_seconds(value: &str) -> std::result::Result<Option<Value>, &'static str> {
    match number(value) {
        Some(s) if s > 0.0 => Ok(Some(Value::from(((s * 1000.0) as u64).max(1)))),
        _ => Err("expected a positive number of seconds"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::RankSpec;
    use super::*;

    const MINIMAL: &str = r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]}}"#;

    fn spec_with(json: &str, variables: &[(&str, &str)]) -> Result<RankSpec> {
        RankSpec::from_json(json, |name| {
            variables
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn horovods_variables_fill_the_spec() {
        let spec = spec_with(
            MINIMAL,
            &[
                ("HOROVOD_RS_CONNECT_TIMEOUT_SECONDS", "2.5"),
                ("HOROVOD_RS_TIMEOUT_SECONDS", "10"),
                ("HOROVOD_HIERARCHICAL_ALLREDUCE", " False "),
                ("HOROVOD_RS_TLS", "on"),
                ("HOROVOD_FUSION_THRESHOLD", "1048576"),
                ("HOROVOD_CYCLE_TIME", "0.5"),
                ("HOROVOD_STALL_CHECK_TIME_SECONDS", "30"),
                ("HOROVOD_CACHE_CAPACITY", "0"),
            ],
        )
        .unwrap();
        assert_eq!(spec.connect_timeout, Duration::from_millis(2500));
        assert_eq!(spec.collective_timeout, Duration::from_secs(10));
        assert!(!spec.hierarchical_allreduce);
        assert!(spec.tls);
        assert_eq!(spec.engine.fusion_threshold, 1 << 20);
        assert_eq!(spec.engine.cycle_time, Duration::from_millis(1));
        assert_eq!(spec.engine.stall_warning, Duration::from_secs(30));
        // Derived from the collective timeout the variables set.
        assert_eq!(spec.engine.stall_timeout, Duration::from_secs(8));
        assert_eq!(spec.engine.cache_capacity, 0);
    }

    #[test]
    fn the_json_wins_over_a_variable() {
        let json = r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]},
                       "tls": false, "engine": {"stall_timeout_ms": 5000}}"#;
        let spec = spec_with(
            json,
            &[
                ("HOROVOD_RS_TLS", "1"),
                ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "9"),
            ],
        )
        .unwrap();
        assert!(!spec.tls);
        assert_eq!(spec.engine.stall_timeout, Duration::from_secs(5));
    }

    #[test]
    fn horovods_zero_stall_shutdown_keeps_the_derived_bound() {
        let spec = spec_with(MINIMAL, &[("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0")]).unwrap();
        assert_eq!(spec.engine.stall_timeout, Duration::from_secs(480));
        let spec = spec_with(MINIMAL, &[("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "3")]).unwrap();
        assert_eq!(spec.engine.stall_timeout, Duration::from_secs(3));
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (variable, value) in [
            ("HOROVOD_RS_TLS", "sometimes"),
            ("HOROVOD_FUSION_THRESHOLD", "64m"),
            ("HOROVOD_CYCLE_TIME", "soon"),
            ("HOROVOD_RS_TIMEOUT_SECONDS", "0"),
            ("HOROVOD_STALL_CHECK_TIME_SECONDS", "-1"),
        ] {
            let error = spec_with(MINIMAL, &[(variable, value)])
                .unwrap_err()
                .to_string();
            assert!(error.contains(variable) && error.contains(value), "{error}");
        }
    }

    #[test]
    fn the_tls_setting_takes_the_usual_spellings_and_names_a_bad_one() {
        for on in ["1", "true", "TRUE", " yes ", "on"] {
            assert!(tls_setting(Some(on)).unwrap(), "{on}");
        }
        for off in [
            None,
            Some(""),
            Some("0"),
            Some("false"),
            Some("no"),
            Some("off"),
        ] {
            assert!(!tls_setting(off).unwrap(), "{off:?}");
        }
        let error = tls_setting(Some("sometimes")).unwrap_err().to_string();
        assert!(
            error.contains("HOROVOD_RS_TLS") && error.contains("sometimes"),
            "{error}"
        );
    }
}
