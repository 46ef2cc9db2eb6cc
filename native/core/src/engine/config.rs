//! The engine's knobs, and how the edges hand them over.
//!
//! [`EngineConfig`] is the typed struct the engine runs with. Edges that
//! parse user configuration elsewhere (the JVM reads Spark conf keys) pass it
//! across as one small text, `key=value` per line ([`EngineConfig::parse`]),
//! rather than one argument per knob.
//!
//! Invariant: the engine never reads the environment; every knob arrives
//! through this struct.

use std::time::Duration;

use crate::error::{Error, Result};

/// The engine's knobs. Defaults are Horovod's where Horovod has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Time between the starts of two negotiation cycles
    /// (`HOROVOD_CYCLE_TIME`, default 1 ms). Shorter lowers latency, longer
    /// fuses more tensors per cycle.
    pub cycle_time: Duration,
    /// Most bytes fused into one allreduce (`HOROVOD_FUSION_THRESHOLD`,
    /// default 128 MiB); 0 turns fusion off. Rank 0's value is used.
    pub fusion_threshold: usize,
    /// A tensor submitted by some ranks and not others for this long is
    /// logged with the missing ranks, and again every period
    /// (`HOROVOD_STALL_CHECK_TIME_SECONDS`, default 60 s); zero turns it off.
    pub stall_warning: Duration,
    /// A tensor submitted by some ranks and not others for this long fails
    /// on every rank with an error naming the missing ranks
    /// (`HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`; zero turns it off). Default
    /// 600 s, not Horovod's "off": a rank that never submits a tensor would
    /// otherwise hold every executor of the barrier stage forever; 600 s is
    /// far above any honest skew between ranks and matches the
    /// communicator's default per-read timeout. Rank 0's value decides.
    pub stall_timeout: Duration,
    /// Responses kept in the response cache (`HOROVOD_CACHE_CAPACITY`,
    /// default 1024); 0 turns the cache off. Rank 0's value is used.
    pub cache_capacity: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cycle_time: Duration::from_millis(1),
            fusion_threshold: 128 * 1024 * 1024,
            stall_warning: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(600),
            cache_capacity: 1024,
        }
    }
}

impl EngineConfig {
    /// Parses `key=value` lines (blank lines ignored) over the defaults.
    /// Keys: `cycle_time_ms`, `fusion_threshold_bytes`, `stall_warning_ms`,
    /// `stall_timeout_ms`, `cache_capacity`; values are non-negative
    /// integers.
    ///
    /// # Errors
    /// `InvalidArgument` naming the line for an unknown key, a line without
    /// `=`, or a value that is not a non-negative integer.
    pub fn parse(text: &str) -> Result<EngineConfig> {
        let mut config = EngineConfig::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let invalid =
                |why: &str| Error::InvalidArgument(format!("engine config line {line:?}: {why}"));
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| invalid("expected key=value"))?;
            let number: u64 = value
                .trim()
                .parse()
                .map_err(|_| invalid("the value is not a non-negative integer"))?;
            let size = || usize::try_from(number).map_err(|_| invalid("the value is too large"));
            match key.trim() {
                "cycle_time_ms" => config.cycle_time = Duration::from_millis(number),
                "fusion_threshold_bytes" => config.fusion_threshold = size()?,
                "stall_warning_ms" => config.stall_warning = Duration::from_millis(number),
                "stall_timeout_ms" => config.stall_timeout = Duration::from_millis(number),
                "cache_capacity" => config.cache_capacity = size()?,
                _ => return Err(invalid("unknown key")),
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_overrides_defaults_and_names_bad_lines() {
        let config = EngineConfig::parse(
            "cycle_time_ms=5\nfusion_threshold_bytes=1024\n\nstall_warning_ms=0\nstall_timeout_ms=2000\n",
        )
        .unwrap();
        assert_eq!(
            config,
            EngineConfig {
                cycle_time: Duration::from_millis(5),
                fusion_threshold: 1024,
                stall_warning: Duration::ZERO,
                stall_timeout: Duration::from_secs(2),
                ..EngineConfig::default()
            }
        );
        assert_eq!(EngineConfig::parse("").unwrap(), EngineConfig::default());
        let err = EngineConfig::parse("cycle_time=5").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid argument: engine config line \"cycle_time=5\": unknown key"
        );
        assert!(EngineConfig::parse("cache_capacity=-1").is_err());
        assert!(EngineConfig::parse("cache_capacity").is_err());
    }
}
