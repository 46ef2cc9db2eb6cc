//! The engine's knobs.
//!
//! [`EngineConfig`] is the typed struct the engine runs with. It arrives as
//! part of a rank's [`crate::launch::RankSpec`], where the edges put what
//! users configured (Spark conf keys, Horovod's variables).
//!
//! Invariant: the engine never reads the environment; every knob arrives
//! through this struct.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::stall::StallPolicy;
use crate::error::{Error, Result};

/// Largest cache accepted: its bit vectors are ANDed every cycle.
pub(crate) const MAX_CACHE_CAPACITY: usize = 1 << 20;

/// The engine's knobs. Defaults are Horovod's where Horovod has one.
///
/// In JSON (the `engine` object of a [`crate::launch::RankSpec`]) each
/// field is optional: `cycle_time_ms`, `fusion_threshold_bytes`,
/// `stall_warning_ms`, `stall_timeout_ms`, `cache_capacity`, non-negative
/// integers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Time between the starts of two negotiation cycles
    /// (`HOROVOD_CYCLE_TIME`, default 1 ms). Shorter lowers latency, longer
    /// fuses more tensors per cycle.
    #[serde(rename = "cycle_time_ms", with = "crate::millis")]
    pub cycle_time: Duration,
    /// Most bytes fused into one allreduce (`HOROVOD_FUSION_THRESHOLD`,
    /// default 128 MiB); 0 turns fusion off. Rank 0's value is used.
    #[serde(rename = "fusion_threshold_bytes")]
    pub fusion_threshold: usize,
    /// A tensor submitted by some ranks and not others for this long is
    /// logged with the missing ranks, and again every period
    /// (`HOROVOD_STALL_CHECK_TIME_SECONDS`, default 60 s); zero turns it off.
    #[serde(rename = "stall_warning_ms", with = "crate::millis")]
    pub stall_warning: Duration,
    /// A tensor submitted by some ranks and not others for this long fails
    /// on every rank with an error naming the missing ranks
    /// (`HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`; zero turns it off). Default
    /// 600 s, not Horovod's "off": a rank that never submits a tensor would
    /// otherwise hold every executor of the barrier stage forever; 600 s is
    /// far above any honest skew between ranks and matches the
    /// communicator's default per-read timeout. Rank 0's value decides.
    #[serde(rename = "stall_timeout_ms", with = "crate::millis")]
    pub stall_timeout: Duration,
    /// Responses kept in the response cache (`HOROVOD_CACHE_CAPACITY`,
    /// default 1024); 0 turns the cache off. Rank 0's value is used.
    pub cache_capacity: usize,
}

impl EngineConfig {
    /// Refuses knobs the engine cannot run with.
    ///
    /// # Errors
    /// `InvalidArgument` for a cache capacity above [`MAX_CACHE_CAPACITY`].
    pub(crate) fn check(&self) -> Result<()> {
        if self.cache_capacity > MAX_CACHE_CAPACITY {
            return Err(Error::InvalidArgument(format!(
                "cache capacity {} is above the maximum {MAX_CACHE_CAPACITY}",
                self.cache_capacity
            )));
        }
        Ok(())
    }

    /// When waiting tensors are reported and failed.
    pub(crate) fn stall_policy(&self) -> StallPolicy {
        StallPolicy {
            warning: self.stall_warning,
            timeout: self.stall_timeout,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_override_defaults_and_unknown_ones_are_refused() {
        let config: EngineConfig = serde_json::from_str(
            r#"{"cycle_time_ms": 5, "fusion_threshold_bytes": 1024, "stall_warning_ms": 0, "stall_timeout_ms": 2000}"#,
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
        assert_eq!(
            serde_json::from_str::<EngineConfig>("{}").unwrap(),
            EngineConfig::default()
        );
        let err = serde_json::from_str::<EngineConfig>(r#"{"cycle_time": 5}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `cycle_time`"),
            "{err}"
        );
        assert!(serde_json::from_str::<EngineConfig>(r#"{"cache_capacity": -1}"#).is_err());
    }
}
