//! Where horovod-rs's log lines go when a binding has no logger of its own.
//!
//! The crates log through the `log` facade; without a logger installed its
//! records vanish, and with them the engine's stall warnings, the first thing
//! a user needs when a job seems stuck. The bindings (Python, JVM) install
//! [`StderrLogger`]: one line per record on standard error, which the
//! launcher prefixes with the rank and Spark keeps in the executor's log.
//! Only horovod-rs's own records pass, at the level of Horovod's
//! `HOROVOD_LOG_LEVEL` (default: warnings).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{LevelFilter, Log, Metadata, Record};

/// Writes horovod-rs's records at or above a level to standard error.
#[derive(Debug)]
pub struct StderrLogger {
    level: LevelFilter,
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.level && metadata.target().starts_with("horovod")
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = format!(
                "[{}] [horovod-rs {}] {}\n",
                utc_time_of_day(SystemTime::now()),
                record.level(),
                record.args()
            );
            // One write per line, so lines of threads do not interleave.
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Installs a [`StderrLogger`] at `level` unless the process already has a
/// logger (say, the host application's); true if this one was installed.
pub fn install_stderr_logger(level: LevelFilter) -> bool {
    let installed = log::set_boxed_logger(Box::new(StderrLogger { level })).is_ok();
    if installed {
        log::set_max_level(level);
    }
    installed
}

/// [`install_stderr_logger`] at the level `HOROVOD_LOG_LEVEL` names
/// (warnings when unset; an unknown name says so and keeps warnings).
pub fn install_stderr_logger_from_env() -> bool {
    let value = std::env::var("HOROVOD_LOG_LEVEL").ok();
    let level = value
        .as_deref()
        .map_or(Some(LevelFilter::Warn), parse_level);
    let installed = install_stderr_logger(level.unwrap_or(LevelFilter::Warn));
    if let (None, Some(value)) = (level, value) {
        log::warn!(
            "HOROVOD_LOG_LEVEL={value:?} is not one of trace, debug, info, warning, error, fatal; using warning"
        );
    }
    installed
}

/// The level for a value of Horovod's `HOROVOD_LOG_LEVEL` (`trace`,
/// `debug`, `info`, `warning`, `error`, `fatal`; any case), `None` for
/// anything else.
pub fn parse_level(name: &str) -> Option<LevelFilter> {
    Some(match name.trim().to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::Trace,
        "debug" => LevelFilter::Debug,
        "info" => LevelFilter::Info,
        "warning" | "warn" => LevelFilter::Warn,
        "error" | "fatal" => LevelFilter::Error,
        "off" | "none" => LevelFilter::Off,
        _ => return None,
    })
}

/// `HH:MM:SS.mmm` in UTC.
fn utc_time_of_day(now: SystemTime) -> String {
    let millis = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let day_millis = millis % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_millis / 3_600_000,
        day_millis / 60_000 % 60,
        day_millis / 1000 % 60,
        day_millis % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn horovod_level_names_map_to_log_levels() {
        assert_eq!(parse_level("WARNING"), Some(LevelFilter::Warn));
        assert_eq!(parse_level(" debug "), Some(LevelFilter::Debug));
        assert_eq!(parse_level("fatal"), Some(LevelFilter::Error));
        assert_eq!(parse_level("loud"), None);
    }

    #[test]
    fn only_horovod_records_at_the_level_pass() {
        let logger = StderrLogger {
            level: LevelFilter::Warn,
        };
        let metadata = |level, target| Metadata::builder().level(level).target(target).build();
        assert!(logger.enabled(&metadata(log::Level::Warn, "horovod_core::engine")));
        assert!(!logger.enabled(&metadata(log::Level::Info, "horovod_core::engine")));
        assert!(!logger.enabled(&metadata(log::Level::Error, "cudarc::driver")));
    }

    #[test]
    fn time_of_day_is_utc_clock_time() {
        let t = UNIX_EPOCH + Duration::from_millis(86_400_000 * 3 + 3_723_045);
        assert_eq!(utc_time_of_day(t), "01:02:03.045");
    }
}
