//! Every setting of a job, in one table ([`SETTINGS`]): its Spark conf key
//! (`spark.horovod.rs.*`), Horovod's environment variable where Horovod has
//! one, what it sets (a field of the [`RankSpec`], or a setting of the
//! driver), its default and a line of docs.
//!
//! Both Spark drivers read it: the JVM's through native/jni, the Python
//! package's through its binding. [`job_settings`] turns the keys and
//! variables a driver sees into the spec fields the user set, which travel
//! to every rank inside its spec, and the driver's own settings. A rank
//! fills the fields its spec still leaves out from Horovod's variables in
//! its own environment (Spark's `spark.executorEnv.*`, a launcher's
//! environment), then from the defaults ([`RankSpec::from_json`]).
//!
//! Invariant: a default is declared once, where the value lives: a rank
//! spec's on [`RankSpec`] and [`crate::engine::EngineConfig`], the driver's
//! on [`DriverSettings`]. The table only points at them
//! ([`DefaultValue::Declared`]), so the docs it writes cannot drift from
//! what runs.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::formats::{self, Reason};
use super::RankSpec;
use crate::error::{Error, Result};
use crate::tls::TLS_VARIABLE;

/// The share of the collective timeout after which, unless the spec or
/// `HOROVOD_STALL_SHUTDOWN_TIME_SECONDS` says otherwise, the stall check
/// fails a tensor some ranks never submitted: before a wait times out
/// knowing no ranks, the stall check names them.
const STALL_SHARE_OF_COLLECTIVE_TIMEOUT: f64 = 0.8;

const COLLECTIVE_TIMEOUT_KEY: &str = "spark.horovod.rs.collectiveTimeout";

/// One setting: where users give it, what it sets, and how its values read.
pub struct Setting {
    /// Its Spark conf key.
    pub key: &'static str,
    /// Horovod's environment variable for it, if there is one.
    pub variable: Option<Variable>,
    /// What it sets.
    pub target: Target,
    /// What it is when nobody sets it.
    pub default: DefaultValue,
    /// One line for the docs.
    pub doc: &'static str,
    /// The key's value (Spark's format) as the target's JSON value.
    parse_key: fn(&str) -> std::result::Result<Value, Reason>,
    /// The target's JSON value as the docs write it (Spark's format).
    show: fn(&Value) -> String,
}

/// Horovod's environment variable for a setting.
pub struct Variable {
    /// The variable's name.
    pub name: &'static str,
    /// Its value (Horovod's format) as the target's JSON value, or `None`
    /// when the value means "unset".
    parse: fn(&str) -> std::result::Result<Option<Value>, Reason>,
}

/// What a setting sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A field of the rank spec, by its path in the spec's JSON.
    Spec(&'static [&'static str]),
    /// A field of [`DriverSettings`], by its name in JSON.
    Driver(&'static str),
}

/// What an unset setting is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DefaultValue {
    /// The default declared with its target's field ([`RankSpec`],
    /// [`crate::engine::EngineConfig`], [`DriverSettings`]).
    Declared,
    /// `share` times the value of the setting whose key is `of`: a rank
    /// derives it when its spec and its variables leave the field out.
    ShareOf {
        /// The factor.
        share: f64,
        /// The key of the setting it derives from.
        of: &'static str,
    },
}

/// Every setting, in the order the docs list them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "spark.horovod.rs.connectTimeout",
        variable: Some(Variable {
            name: "HOROVOD_RS_CONNECT_TIMEOUT_SECONDS",
            parse: positive_seconds,
        }),
        target: Target::Spec(&["connect_timeout_ms"]),
        default: DefaultValue::Declared,
        doc: "How long a rank may take to join its job (the address exchange, then the links the join \
              uses), and how long opening a link to another rank may take later.",
        parse_key: positive_millis,
        show: show_millis,
    },
    Setting {
        key: COLLECTIVE_TIMEOUT_KEY,
        variable: Some(Variable {
            name: "HOROVOD_RS_TIMEOUT_SECONDS",
            parse: positive_seconds,
        }),
        target: Target::Spec(&["collective_timeout_ms"]),
        default: DefaultValue::Declared,
        doc: "How long a collective may wait on a silent peer before it fails naming that rank.",
        parse_key: positive_millis,
        show: show_millis,
    },
    Setting {
        key: "spark.horovod.rs.hierarchicalAllreduce",
        variable: Some(Variable {
            name: "HOROVOD_HIERARCHICAL_ALLREDUCE",
            // Only an explicit "off" turns it off: on several hosts it is the faster allreduce.
            parse: |value| {
                let off = matches!(value.trim().to_ascii_lowercase().as_str(), "0" | "false");
                Ok(Some(Value::Bool(!off)))
            },
        }),
        target: Target::Spec(&["hierarchical_allreduce"]),
        default: DefaultValue::Declared,
        doc: "Whether ranks on several hosts reduce within each host first, then across hosts; false \
              keeps them on one flat TCP level.",
        parse_key: switch,
        show: show_plain,
    },
    Setting {
        key: "spark.horovod.rs.tls",
        variable: Some(Variable {
            name: TLS_VARIABLE,
            parse: |value| match formats::horovod_switch(value) {
                Some(on) => Ok(Some(Value::Bool(on))),
                None => Err("expected 1 or 0 (true or false)"),
            },
        }),
        target: Target::Spec(&["tls"]),
        default: DefaultValue::Declared,
        doc: "Whether the links between ranks are encrypted (TLS 1.3 keyed from the job's secret); \
              every rank must agree.",
        parse_key: switch,
        show: show_plain,
    },
    Setting {
        key: "spark.horovod.rs.fusionThreshold",
        variable: Some(Variable {
            name: "HOROVOD_FUSION_THRESHOLD",
            parse: |value| count(value).map(Some),
        }),
        target: Target::Spec(&["engine", "fusion_threshold_bytes"]),
        default: DefaultValue::Declared,
        doc: "Most bytes the engine fuses into one allreduce; 0 turns fusion off; rank 0's value is \
              used.",
        parse_key: |value| formats::spark_bytes(value).map(Value::from).ok_or(SIZE),
        show: show_bytes,
    },
    Setting {
        key: "spark.horovod.rs.cycleTime",
        variable: Some(Variable {
            name: "HOROVOD_CYCLE_TIME",
            // Milliseconds, as in Horovod.
            parse: |value| match formats::number(value) {
                Some(ms) if ms >= 0.0 => Ok(Some(cycle(ms as u64))),
                _ => Err("expected a number of milliseconds"),
            },
        }),
        target: Target::Spec(&["engine", "cycle_time_ms"]),
        default: DefaultValue::Declared,
        doc: "Time between the starts of two engine cycles: shorter lowers the latency of a single \
              collective, longer fuses more tensors per cycle.",
        parse_key: |value| formats::spark_millis(value).map(cycle).ok_or(TIME),
        show: show_millis,
    },
    Setting {
        key: "spark.horovod.rs.stallWarning",
        variable: Some(Variable {
            name: "HOROVOD_STALL_CHECK_TIME_SECONDS",
            parse: seconds,
        }),
        target: Target::Spec(&["engine", "stall_warning_ms"]),
        default: DefaultValue::Declared,
        doc: "A tensor submitted by some ranks and not others for this long is logged with the \
              missing ranks, and again every period; 0 turns it off.",
        parse_key: millis,
        show: show_millis,
    },
    Setting {
        key: "spark.horovod.rs.stallTimeout",
        variable: Some(Variable {
            name: "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
            // Horovod's 0 means "never"; ours keeps the bound derived from the collective timeout.
            parse: |value| Ok(seconds(value)?.filter(|ms| ms.as_u64() != Some(0))),
        }),
        target: Target::Spec(&["engine", "stall_timeout_ms"]),
        default: DefaultValue::ShareOf {
            share: STALL_SHARE_OF_COLLECTIVE_TIMEOUT,
            of: COLLECTIVE_TIMEOUT_KEY,
        },
        doc: "A tensor submitted by some ranks and not others for this long fails on every rank \
              that submitted it, naming the missing ranks; the key's 0 waits forever, the \
              variable's 0 keeps the default.",
        parse_key: millis,
        show: show_millis,
    },
    Setting {
        key: "spark.horovod.rs.cacheCapacity",
        variable: Some(Variable {
            name: "HOROVOD_CACHE_CAPACITY",
            parse: |value| count(value).map(Some),
        }),
        target: Target::Spec(&["engine", "cache_capacity"]),
        default: DefaultValue::Declared,
        doc: "Responses the engine keeps in its response cache; 0 turns the cache off; rank 0's \
              value is used.",
        parse_key: count,
        show: show_plain,
    },
    Setting {
        key: "spark.horovod.rs.startTimeout",
        variable: Some(Variable {
            name: "HOROVOD_SPARK_START_TIMEOUT",
            parse: |value| match formats::number(value) {
                Some(s) if s > 0.0 => Ok(Some(Value::from(s))),
                _ => Err("expected a positive number of seconds"),
            },
        }),
        target: Target::Driver("start_timeout_s"),
        default: DefaultValue::Declared,
        doc: "How long a job may wait for task slots and for all its ranks to start; past it the \
              job fails saying how many slots or ranks there were.",
        parse_key: |value| Ok(Value::from(positive_millis(value)?.as_f64().unwrap_or(0.0) / 1e3)),
        show: |value| formats::time_text((value.as_f64().unwrap_or(0.0) * 1e3) as u64),
    },
    Setting {
        key: "spark.horovod.rs.fitAttempts",
        variable: None,
        target: Target::Driver("fit_attempts"),
        default: DefaultValue::Declared,
        doc: "How many times a fit runs its barrier job when Spark loses a rank outside the \
              model's code (an executor dies); every attempt after the first resumes from the \
              store's last checkpoint, or starts over when the fit has no store.",
        parse_key: |value| match value.trim().parse::<u32>() {
            Ok(attempts) if attempts >= 1 => Ok(Value::from(attempts)),
            _ => Err("expected a whole number of at least 1"),
        },
        show: show_plain,
    },
    Setting {
        key: "spark.horovod.rs.fitMinProcesses",
        variable: None,
        target: Target::Driver("fit_min_processes"),
        default: DefaultValue::Declared,
        doc: "When a fit runs its barrier job again after losing a rank, how few ranks it may \
              run with: the next attempt takes the task slots the cluster has \
              then, down to this many (rows and steps per epoch rebalance over them), instead of \
              waiting for all of num_proc; with a store, an attempt on fewer ranks stops after \
              the epoch in which the slots come back and the next one resumes on num_proc; \
              unset: every attempt waits for num_proc.",
        parse_key: |value| match value.trim().parse::<u32>() {
            Ok(processes) if processes >= 1 => Ok(Value::from(processes)),
            _ => Err("expected a whole number of at least 1"),
        },
        show: |value| match value {
            Value::Null => "unset".into(),
            _ => show_plain(value),
        },
    },
    Setting {
        key: "spark.horovod.rs.gpusPerRank",
        variable: None,
        target: Target::Driver("gpus_per_rank"),
        default: DefaultValue::Declared,
        doc: "GPUs requested for each rank's task; 0 runs on CPUs only.",
        parse_key: |value| match formats::number(value) {
            Some(gpus) if gpus >= 0.0 => Ok(Value::from(gpus)),
            _ => Err("expected a non-negative number"),
        },
        show: show_plain,
    },
    Setting {
        key: "spark.horovod.rs.driverRendezvous",
        variable: None,
        target: Target::Driver("driver_rendezvous"),
        default: DefaultValue::Declared,
        doc: "How ranks exchange addresses: true through a service on the driver (executors must \
              reach the driver on one more port), false through one that rank 0's task hosts on a \
              port derived from the job's secret (reachable wherever the ranks' own links are); \
              auto picks the driver's when the driver runs in the cluster (a classic session, the \
              JVM), rank 0's under Spark Connect. run_elastic's coordinator likewise: true on the \
              driver, false in a process on an executor.",
        parse_key: |value| match value.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Value::from("auto")),
            "true" => Ok(Value::from("on")),
            "false" => Ok(Value::from("off")),
            _ => Err("expected auto, true or false"),
        },
        show: |value| match value.as_str() {
            Some("on") => "true".into(),
            Some("off") => "false".into(),
            _ => show_plain(value),
        },
    },
];

/// A driver's own settings: what it does before and around the ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DriverSettings {
    /// How long a job may wait for task slots and for all its ranks to
    /// start (default 600 s, Horovod's).
    #[serde(rename = "start_timeout_s", with = "seconds_f64")]
    pub start_timeout: Duration,
    /// How many times a fit runs its barrier job when Spark loses a rank
    /// outside the model's code (default 3, at least 1).
    pub fit_attempts: u32,
    /// The fewest ranks an attempt after the first may run with (default
    /// none: every attempt waits for all of its ranks' slots).
    pub fit_min_processes: Option<u32>,
    /// GPUs each rank's task asks for (default 0: CPUs only).
    pub gpus_per_rank: f64,
    /// How the ranks exchange their addresses (default auto).
    pub driver_rendezvous: DriverRendezvous,
}

impl Default for DriverSettings {
    fn default() -> Self {
        DriverSettings {
            start_timeout: Duration::from_secs(600),
            fit_attempts: 3,
            fit_min_processes: None,
            gpus_per_rank: 0.0,
            driver_rendezvous: DriverRendezvous::Auto,
        }
    }
}

/// How the ranks of a job exchange their addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverRendezvous {
    /// Through the driver's rendezvous service when the driver runs inside
    /// the cluster (a classic session, always on the JVM); among the ranks
    /// (Spark's barrier `allGather`) under Spark Connect, whose driver the
    /// executors may not reach.
    #[default]
    Auto,
    /// Always through the driver's rendezvous service.
    On,
    /// Always among the ranks, with Spark's barrier `allGather`.
    Off,
}

/// A job's settings, as a driver reads them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobSettings {
    /// The rank-spec fields the user set, as a JSON object for the ranks'
    /// specs: nothing else, so a rank's own environment and the defaults
    /// fill the rest.
    pub spec: Value,
    /// The driver's settings, defaults filled.
    pub driver: DriverSettings,
}

/// The settings of a job whose driver sees the Spark conf keys `key` looks
/// up and Horovod's variables `variable` looks up; a key wins over its
/// variable.
///
/// # Errors
/// `InvalidArgument` naming the key or variable whose value is refused,
/// with that value.
pub fn job_settings(
    key: impl Fn(&str) -> Option<String>,
    variable: impl Fn(&str) -> Option<String>,
) -> Result<JobSettings> {
    let mut spec = Map::new();
    let mut driver = Map::new();
    for setting in SETTINGS {
        let Some(value) = setting.read(&key, &variable)? else {
            continue;
        };
        match setting.target {
            Target::Spec(path) => {
                let (name, parents) = split(path);
                object_at(&mut spec, parents)?.insert(name.into(), value);
            }
            Target::Driver(name) => {
                driver.insert(name.into(), value);
            }
        }
    }
    let driver = serde_json::from_value(Value::Object(driver))
        .map_err(|error| Error::InvalidArgument(format!("driver settings: {error}")))?;
    Ok(JobSettings {
        spec: Value::Object(spec),
        driver,
    })
}

/// The rank-spec fields a rank runs with when its spec holds `fields` (a
/// JSON object of spec fields, such as [`JobSettings::spec`]) and its
/// environment sets none of Horovod's variables: `fields` with the
/// defaults filled in.
///
/// # Errors
/// `InvalidArgument` when `fields` is not an object of spec fields.
pub fn spec_with_defaults(fields: &Value) -> Result<Value> {
    let mut fields = fields
        .as_object()
        .cloned()
        .ok_or_else(|| Error::InvalidArgument("spec fields: expected a JSON object".into()))?;
    fill_derived(&mut fields)?;
    Ok(Value::Object(settled(fields)?))
}

/// Every setting's Spark conf key.
pub fn keys() -> impl Iterator<Item = &'static str> {
    SETTINGS.iter().map(|setting| setting.key)
}

/// Every Horovod variable the table reads: what a driver passes to
/// [`job_settings`].
pub fn variables() -> impl Iterator<Item = &'static str> {
    SETTINGS
        .iter()
        .filter_map(|setting| Some(setting.variable.as_ref()?.name))
}

/// The Horovod variables that fill rank-spec fields: what a driver hands
/// its ranks from its own environment, as Horovod does.
pub fn spec_variables() -> impl Iterator<Item = &'static str> {
    SETTINGS
        .iter()
        .filter(|setting| matches!(setting.target, Target::Spec(_)))
        .filter_map(|setting| Some(setting.variable.as_ref()?.name))
}

impl Setting {
    /// The value the user gave: through the key `key` looks up, else through
    /// the variable `variable` looks up; `None` when neither sets it.
    fn read(
        &self,
        key: impl Fn(&str) -> Option<String>,
        variable: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Value>> {
        match (key(self.key), &self.variable) {
            (Some(text), _) => (self.parse_key)(&text)
                .map(Some)
                .map_err(|why| invalid(self.key, &text, why)),
            (None, Some(known)) => known.read(variable),
            (None, None) => Ok(None),
        }
    }

    /// The default as the docs write it, in the key's format: `600s`,
    /// `128m`, `true`, or how it derives (`0.8 × collectiveTimeout`).
    pub fn default_text(&self) -> String {
        match self.default {
            DefaultValue::ShareOf { share, of } => {
                format!("{share} × {}", of.trim_start_matches("spark.horovod.rs."))
            }
            DefaultValue::Declared => {
                let declared = match self.target {
                    Target::Spec(path) => value_at(&declared_spec_defaults(), path).cloned(),
                    Target::Driver(name) => serde_json::to_value(DriverSettings::default())
                        .ok()
                        .and_then(|driver| driver.get(name).cloned()),
                };
                (self.show)(&declared.unwrap_or(Value::Null))
            }
        }
    }
}

impl Variable {
    /// The value of this variable as `variable` looks it up; `None` when it
    /// is unset or its value means "unset".
    fn read(&self, variable: impl Fn(&str) -> Option<String>) -> Result<Option<Value>> {
        match variable(self.name) {
            Some(text) => (self.parse)(&text).map_err(|why| invalid(self.name, &text, why)),
            None => Ok(None),
        }
    }
}

/// Fills the fields `spec` (a rank spec's JSON) leaves out from the
/// variables `variable` looks up, then the derived defaults.
pub(super) fn fill_missing(
    spec: &mut Value,
    variable: impl Fn(&str) -> Option<String>,
) -> Result<()> {
    let fields = spec
        .as_object_mut()
        .ok_or_else(|| Error::InvalidArgument("rank spec: expected a JSON object".into()))?;
    for setting in SETTINGS {
        let (Target::Spec(path), Some(known)) = (setting.target, &setting.variable) else {
            continue;
        };
        if value_at_map(fields, path).is_some() {
            continue;
        }
        if let Some(value) = known.read(&variable)? {
            let (name, parents) = split(path);
            object_at(fields, parents)?.insert(name.into(), value);
        }
    }
    fill_derived(fields)
}

/// Fills each field left out whose default derives from another setting,
/// from that setting's field or default.
fn fill_derived(fields: &mut Map<String, Value>) -> Result<()> {
    for setting in SETTINGS {
        let (Target::Spec(path), DefaultValue::ShareOf { share, of }) =
            (setting.target, setting.default)
        else {
            continue;
        };
        if value_at_map(fields, path).is_some() {
            continue;
        }
        let Some(Target::Spec(base_path)) = SETTINGS.iter().find(|s| s.key == of).map(|s| s.target)
        else {
            unreachable!("{} derives from {of}, a rank-spec setting", setting.key);
        };
        let base = match value_at_map(fields, base_path) {
            Some(value) => value.clone(),
            None => value_at(&declared_spec_defaults(), base_path)
                .cloned()
                .unwrap_or(Value::Null),
        };
        let base = base.as_u64().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "rank spec: `{}` must be a whole number",
                base_path.join(".")
            ))
        })?;
        let (name, parents) = split(path);
        object_at(fields, parents)?.insert(name.into(), Value::from((base as f64 * share) as u64));
    }
    Ok(())
}

/// The spec fields a rank spec holding `fields` deserialises to, every
/// default filled. A spec also needs who the rank is and how it meets the
/// others, which no setting says: a placeholder stands in for them.
fn settled(mut fields: Map<String, Value>) -> Result<Map<String, Value>> {
    const IDENTITY: [&str; 3] = ["rank", "size", "rendezvous"];
    fields.insert("rank".into(), Value::from(0));
    fields.insert("size".into(), Value::from(1));
    fields.insert("rendezvous".into(), serde_json::json!({"entries": [""]}));
    let spec: RankSpec =
        serde_json::from_value(Value::Object(fields)).map_err(super::invalid_spec)?;
    let Value::Object(mut settled) = serde_json::to_value(spec).map_err(super::invalid_spec)?
    else {
        unreachable!("a rank spec serialises to an object");
    };
    for name in IDENTITY {
        settled.remove(name);
    }
    Ok(settled)
}

/// The defaults declared on [`RankSpec`] and its engine config, as spec
/// fields in JSON.
fn declared_spec_defaults() -> Value {
    Value::Object(settled(Map::new()).expect("a spec of no settings takes every default"))
}

/// Whether `HOROVOD_RS_TLS`'s `value` turns encryption on: `1`, `true`,
/// `yes` or `on` do; unset, empty, `0`, `false`, `no` or `off` do not;
/// anything else is refused, naming the variable.
pub fn tls_setting(value: Option<&str>) -> Result<bool> {
    match value {
        None => Ok(false),
        Some(value) => formats::horovod_switch(value)
            .ok_or_else(|| invalid(TLS_VARIABLE, value, "expected 1 or 0 (true or false)")),
    }
}

fn invalid(name: &str, value: &str, why: Reason) -> Error {
    Error::InvalidArgument(format!("{name}={value:?}: {why}"))
}

/// A path's last name and the names of the objects holding it.
fn split(path: &'static [&'static str]) -> (&'static str, &'static [&'static str]) {
    let (name, parents) = path.split_last().expect("every spec target names a field");
    (name, parents)
}

fn value_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |value, name| value.get(name))
}

fn value_at_map<'a>(fields: &'a Map<String, Value>, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    value_at(fields.get(*first)?, rest)
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

const TIME: Reason = "expected a time such as 60s, 5min or 500ms (a bare number is milliseconds)";
const POSITIVE_TIME: Reason =
    "expected a positive time such as 600s, 5min or 500ms (a bare number is milliseconds)";
const SIZE: Reason = "expected a size such as 128m, 1g or 4096 (a bare number is bytes)";

/// A Spark time key's value as milliseconds.
fn millis(value: &str) -> std::result::Result<Value, Reason> {
    formats::spark_millis(value).map(Value::from).ok_or(TIME)
}

fn positive_millis(value: &str) -> std::result::Result<Value, Reason> {
    match formats::spark_millis(value) {
        Some(ms) if ms > 0 => Ok(Value::from(ms)),
        _ => Err(POSITIVE_TIME),
    }
}

/// The engine cycles at most once per millisecond.
fn cycle(millis: u64) -> Value {
    Value::from(millis.max(1))
}

fn switch(value: &str) -> std::result::Result<Value, Reason> {
    formats::spark_switch(value)
        .map(Value::Bool)
        .ok_or("expected true or false")
}

fn count(value: &str) -> std::result::Result<Value, Reason> {
    formats::count(value)
        .map(Value::from)
        .ok_or("expected a non-negative whole number")
}

/// A Horovod variable's seconds as milliseconds.
fn seconds(value: &str) -> std::result::Result<Option<Value>, Reason> {
    match formats::number(value) {
        Some(s) if s >= 0.0 => Ok(Some(Value::from((s * 1e3) as u64))),
        _ => Err("expected a non-negative number of seconds"),
    }
}

fn positive_seconds(value: &str) -> std::result::Result<Option<Value>, Reason> {
    match formats::number(value) {
        Some(s) if s > 0.0 => Ok(Some(Value::from(((s * 1e3) as u64).max(1)))),
        _ => Err("expected a positive number of seconds"),
    }
}

fn show_millis(value: &Value) -> String {
    value
        .as_u64()
        .map_or_else(|| value.to_string(), formats::time_text)
}

fn show_bytes(value: &Value) -> String {
    value
        .as_u64()
        .map_or_else(|| value.to_string(), formats::size_text)
}

/// Numbers without a needless `.0`, strings without quotes.
fn show_plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(n) if n.is_f64() => {
            let n = n.as_f64().unwrap_or(f64::NAN);
            if n.fract() == 0.0 {
                format!("{n:.0}")
            } else {
                n.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// A [`Duration`] as a number of seconds in JSON, fractions allowed.
mod seconds_f64 {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(value.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        let seconds = f64::deserialize(deserializer)?;
        Duration::try_from_secs_f64(seconds).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::RankSpec;
    use super::*;

    const MINIMAL: &str = r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["a:1"]}}"#;

    fn lookup<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn spec_with(json: &str, variables: &[(&str, &str)]) -> Result<RankSpec> {
        RankSpec::from_json(json, lookup(variables))
    }

    fn settings(keys: &[(&str, &str)], variables: &[(&str, &str)]) -> Result<JobSettings> {
        job_settings(lookup(keys), lookup(variables))
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
            ("HOROVOD_CACHE_CAPACITY", "-1"),
        ] {
            let error = spec_with(MINIMAL, &[(variable, value)])
                .unwrap_err()
                .to_string();
            assert!(error.contains(variable) && error.contains(value), "{error}");
            let error = settings(&[], &[(variable, value)]).unwrap_err().to_string();
            assert!(error.contains(variable) && error.contains(value), "{error}");
        }
        let error = settings(&[], &[("HOROVOD_SPARK_START_TIMEOUT", "0")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "invalid argument: HOROVOD_SPARK_START_TIMEOUT=\"0\": expected a positive number of seconds"
        );
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

    #[test]
    fn nothing_set_sends_no_spec_fields_and_the_drivers_defaults() {
        let settings = settings(&[], &[]).unwrap();
        assert_eq!(
            serde_json::to_value(&settings).unwrap(),
            json!({"spec": {}, "driver": {"start_timeout_s": 600.0, "fit_attempts": 3,
                                          "fit_min_processes": null, "gpus_per_rank": 0.0,
                                          "driver_rendezvous": "auto"}})
        );
    }

    #[test]
    fn every_key_reads_in_sparks_format() {
        let settings = settings(
            &[
                ("spark.horovod.rs.connectTimeout", "2min"),
                ("spark.horovod.rs.collectiveTimeout", "30000"),
                ("spark.horovod.rs.hierarchicalAllreduce", "FALSE"),
                ("spark.horovod.rs.tls", "true"),
                ("spark.horovod.rs.fusionThreshold", "64m"),
                ("spark.horovod.rs.cycleTime", "500us"),
                ("spark.horovod.rs.stallWarning", "0s"),
                ("spark.horovod.rs.stallTimeout", "2min"),
                ("spark.horovod.rs.cacheCapacity", "16"),
                ("spark.horovod.rs.startTimeout", "1500ms"),
                ("spark.horovod.rs.fitAttempts", "1"),
                ("spark.horovod.rs.fitMinProcesses", "2"),
                ("spark.horovod.rs.gpusPerRank", "0.5"),
                ("spark.horovod.rs.driverRendezvous", "False"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(
            settings.spec,
            json!({"connect_timeout_ms": 120_000, "collective_timeout_ms": 30_000,
                   "hierarchical_allreduce": false, "tls": true,
                   "engine": {"fusion_threshold_bytes": 64 << 20, "cycle_time_ms": 1,
                              "stall_warning_ms": 0, "stall_timeout_ms": 120_000,
                              "cache_capacity": 16}})
        );
        assert_eq!(
            settings.driver,
            DriverSettings {
                start_timeout: Duration::from_millis(1500),
                fit_attempts: 1,
                fit_min_processes: Some(2),
                gpus_per_rank: 0.5,
                driver_rendezvous: DriverRendezvous::Off,
            }
        );
        let on = self::settings(&[("spark.horovod.rs.driverRendezvous", "true")], &[]).unwrap();
        assert_eq!(on.driver.driver_rendezvous, DriverRendezvous::On);
    }

    #[test]
    fn every_variable_reads_in_horovods_format_on_the_driver() {
        let settings = settings(
            &[],
            &[
                ("HOROVOD_RS_CONNECT_TIMEOUT_SECONDS", "2.5"),
                ("HOROVOD_RS_TIMEOUT_SECONDS", "10"),
                ("HOROVOD_HIERARCHICAL_ALLREDUCE", "0"),
                ("HOROVOD_RS_TLS", "yes"),
                ("HOROVOD_FUSION_THRESHOLD", "1048576"),
                ("HOROVOD_CYCLE_TIME", "5"),
                ("HOROVOD_STALL_CHECK_TIME_SECONDS", "30"),
                ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0"),
                ("HOROVOD_CACHE_CAPACITY", "0"),
                ("HOROVOD_SPARK_START_TIMEOUT", "42.5"),
            ],
        )
        .unwrap();
        // The stall shutdown's 0 leaves the field to the rank, which derives it.
        assert_eq!(
            settings.spec,
            json!({"connect_timeout_ms": 2500, "collective_timeout_ms": 10_000,
                   "hierarchical_allreduce": false, "tls": true,
                   "engine": {"fusion_threshold_bytes": 1 << 20, "cycle_time_ms": 5,
                              "stall_warning_ms": 30_000, "cache_capacity": 0}})
        );
        assert_eq!(settings.driver.start_timeout, Duration::from_millis(42_500));
    }

    #[test]
    fn a_key_wins_over_its_variable() {
        let settings = settings(
            &[
                ("spark.horovod.rs.tls", "false"),
                ("spark.horovod.rs.startTimeout", "5s"),
            ],
            &[
                ("HOROVOD_RS_TLS", "1"),
                ("HOROVOD_SPARK_START_TIMEOUT", "not even a number"),
                ("HOROVOD_CACHE_CAPACITY", "7"),
            ],
        )
        .unwrap();
        assert_eq!(
            settings.spec,
            json!({"tls": false, "engine": {"cache_capacity": 7}})
        );
        assert_eq!(settings.driver.start_timeout, Duration::from_secs(5));
    }

    #[test]
    fn a_bad_key_is_named_with_its_value() {
        for (key, value) in [
            ("spark.horovod.rs.connectTimeout", "0s"),
            ("spark.horovod.rs.collectiveTimeout", "1.5s"),
            ("spark.horovod.rs.hierarchicalAllreduce", "1"),
            ("spark.horovod.rs.tls", "yes"),
            ("spark.horovod.rs.fusionThreshold", "1.5g"),
            ("spark.horovod.rs.cycleTime", "-1ms"),
            ("spark.horovod.rs.stallWarning", "a minute"),
            ("spark.horovod.rs.stallTimeout", "10 s"),
            ("spark.horovod.rs.cacheCapacity", "-1"),
            ("spark.horovod.rs.startTimeout", "0"),
            ("spark.horovod.rs.fitAttempts", "0"),
            ("spark.horovod.rs.fitMinProcesses", "none"),
            ("spark.horovod.rs.gpusPerRank", "-1"),
            ("spark.horovod.rs.driverRendezvous", "yes please"),
        ] {
            let error = settings(&[(key, value)], &[]).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
            let error = error.to_string();
            assert!(
                error.starts_with(&format!("invalid argument: {key}={value:?}: expected ")),
                "{error}"
            );
        }
    }

    #[test]
    fn a_rank_fills_what_the_drivers_fields_leave_out_from_its_own_environment() {
        let driver = settings(&[("spark.horovod.rs.collectiveTimeout", "100s")], &[]).unwrap();
        let mut json: Value = serde_json::from_str(MINIMAL).unwrap();
        let rank = json.as_object_mut().unwrap();
        rank.extend(driver.spec.as_object().unwrap().clone());
        let spec = spec_with(
            &json.to_string(),
            &[("HOROVOD_RS_TIMEOUT_SECONDS", "5"), ("HOROVOD_RS_TLS", "1")],
        )
        .unwrap();
        assert_eq!(spec.collective_timeout, Duration::from_secs(100));
        assert!(spec.tls);
        // 0.8 × the driver's collective timeout, as on every rank whose spec leaves it out.
        assert_eq!(spec.engine.stall_timeout, Duration::from_secs(80));
    }

    #[test]
    fn spec_with_defaults_fills_every_field_and_derives_the_stall_timeout() {
        assert_eq!(
            spec_with_defaults(&json!({})).unwrap(),
            json!({"connect_timeout_ms": 120_000, "collective_timeout_ms": 600_000,
                   "hierarchical_allreduce": true, "tls": false,
                   "engine": {"cycle_time_ms": 1, "fusion_threshold_bytes": 128 << 20,
                              "stall_warning_ms": 60_000, "stall_timeout_ms": 480_000,
                              "cache_capacity": 1024}})
        );
        let filled = spec_with_defaults(
            &json!({"collective_timeout_ms": 10_000, "engine": {"cache_capacity": 0}}),
        )
        .unwrap();
        assert_eq!(filled["engine"]["stall_timeout_ms"], json!(8_000));
        assert_eq!(filled["engine"]["cache_capacity"], json!(0));
        let error = spec_with_defaults(&json!({"tls": "yes"}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("rank spec: invalid type"), "{error}");
        assert!(spec_with_defaults(&json!([])).is_err());
    }

    #[test]
    fn every_default_reads_back_through_its_key_as_the_declared_value() {
        let declared_spec = spec_with_defaults(&json!({})).unwrap();
        let declared_driver = serde_json::to_value(DriverSettings::default()).unwrap();
        for setting in SETTINGS {
            let text = setting.default_text();
            match (setting.default, setting.target) {
                (DefaultValue::Declared, Target::Spec(path)) => {
                    let read = settings(&[(setting.key, &text)], &[]).unwrap();
                    assert_eq!(
                        value_at(&read.spec, path),
                        value_at(&declared_spec, path),
                        "{}",
                        setting.key
                    );
                }
                // A default of "unset" has no text to read back: the key's absence is it.
                (DefaultValue::Declared, Target::Driver(name))
                    if declared_driver[name].is_null() => {}
                (DefaultValue::Declared, Target::Driver(name)) => {
                    let read = settings(&[(setting.key, &text)], &[]).unwrap();
                    let read = serde_json::to_value(read.driver).unwrap();
                    assert_eq!(read[name], declared_driver[name], "{}", setting.key);
                }
                (DefaultValue::ShareOf { of, .. }, Target::Spec(_)) => {
                    assert!(
                        keys().any(|key| key == of),
                        "{} derives from {of}",
                        setting.key
                    );
                }
                (DefaultValue::ShareOf { .. }, Target::Driver(_)) => {
                    panic!("{}: only rank-spec fields derive", setting.key)
                }
            }
        }
    }

    #[test]
    fn the_defaults_read_as_the_docs_write_them() {
        let defaults: Vec<(&str, String)> = SETTINGS
            .iter()
            .map(|setting| {
                (
                    setting.key.trim_start_matches("spark.horovod.rs."),
                    setting.default_text(),
                )
            })
            .collect();
        let expected = [
            ("connectTimeout", "120s"),
            ("collectiveTimeout", "600s"),
            ("hierarchicalAllreduce", "true"),
            ("tls", "false"),
            ("fusionThreshold", "128m"),
            ("cycleTime", "1ms"),
            ("stallWarning", "60s"),
            ("stallTimeout", "0.8 × collectiveTimeout"),
            ("cacheCapacity", "1024"),
            ("startTimeout", "600s"),
            ("fitAttempts", "3"),
            ("fitMinProcesses", "unset"),
            ("gpusPerRank", "0"),
            ("driverRendezvous", "auto"),
        ];
        assert_eq!(
            defaults,
            expected.map(|(key, text)| (key, text.to_string())).to_vec()
        );
    }

    #[test]
    fn keys_and_variables_are_named_once() {
        let keys: Vec<_> = keys().collect();
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len());
        assert!(keys.iter().all(|key| key.starts_with("spark.horovod.rs.")));
        let variables: Vec<_> = variables().collect();
        let mut unique = variables.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), variables.len());
        assert_eq!(
            spec_variables().collect::<Vec<_>>(),
            variables[..variables.len() - 1],
            "every variable but the driver's start timeout fills a spec field"
        );
        assert_eq!(variables.last(), Some(&"HOROVOD_SPARK_START_TIMEOUT"));
    }

    /// The user guide's table of settings, as the table writes it.
    fn docs_table() -> String {
        let mut table = String::from(
            "| key | Horovod's variable | default | meaning |\n| --- | --- | --- | --- |\n",
        );
        for setting in SETTINGS {
            let variable = setting
                .variable
                .as_ref()
                .map_or_else(String::new, |variable| format!("`{}`", variable.name));
            table.push_str(&format!(
                "| `{}` | {variable} | `{}` | {} |\n",
                setting.key,
                setting.default_text(),
                setting.doc
            ));
        }
        table
    }

    #[test]
    fn the_user_guide_lists_every_setting_as_the_table_declares_it() {
        for setting in SETTINGS {
            assert!(!setting.doc.contains(['|', '\n']), "{}", setting.key);
        }
        let guide = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/user-guide.md");
        let guide = std::fs::read_to_string(guide).unwrap();
        let table = docs_table();
        assert!(
            guide.contains(&table),
            "docs/user-guide.md must hold the table of settings as the code declares it:\n\n{table}"
        );
    }
}
