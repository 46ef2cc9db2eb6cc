//! Where horovod-rs's log lines go.
//!
//! The crates log through the `log` facade; without a logger installed its
//! records vanish, and with them the engine's stall warnings, the first thing
//! a user needs when a job seems stuck. The bindings (Python, JVM) install
//! [`HorovodLogger`]. By default it writes one line per record to standard
//! error, which the launcher prefixes with the rank and Spark keeps in the
//! executor's log. A binding with a logging system of its own (Python's
//! `logging`, log4j on the JVM) turns on [`forward`] and drains the records
//! with [`next_forwarded`] on a thread of its own, so that no engine thread
//! ever waits for the GIL or attaches to the JVM. Only horovod-rs's own
//! records pass, at the level of Horovod's `HOROVOD_LOG_LEVEL` (default:
//! warnings) or the one the binding sets with [`set_level`].

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Records kept for the binding before the oldest are dropped: a binding
/// that stops draining costs bounded memory.
const FORWARD_CAPACITY: usize = 4096;

/// A record on its way to a binding's logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedLine {
    /// The record's level.
    pub level: Level,
    /// The module that logged it (`horovod_core::engine::background`).
    pub target: String,
    /// The message.
    pub message: String,
    /// The rank whose engine thread logged it, when one did.
    pub rank: Option<usize>,
}

struct Forwarding {
    on: bool,
    lines: VecDeque<ForwardedLine>,
    dropped: u64,
}

static FORWARDING: Mutex<Forwarding> = Mutex::new(Forwarding {
    on: false,
    lines: VecDeque::new(),
    dropped: 0,
});
static FORWARDED: Condvar = Condvar::new();
/// The level, as `LevelFilter as usize`: changeable after installation.
static LEVEL: AtomicUsize = AtomicUsize::new(LevelFilter::Warn as usize);

fn level() -> LevelFilter {
    match LEVEL.load(Ordering::Relaxed) {
        0 => LevelFilter::Off,
        1 => LevelFilter::Error,
        2 => LevelFilter::Warn,
        3 => LevelFilter::Info,
        4 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// Lets records at or above `level` through (a binding's own configuration,
/// e.g. log4j's level for horovod-rs).
pub fn set_level(level: LevelFilter) {
    LEVEL.store(level as usize, Ordering::Relaxed);
    log::set_max_level(level);
}

/// Sends records to the binding (`true`), or to standard error again
/// (`false`, which writes out what the binding had not taken yet).
pub fn forward(on: bool) {
    let mut forwarding = FORWARDING.lock().unwrap_or_else(PoisonError::into_inner);
    forwarding.on = on;
    if !on {
        for line in forwarding.lines.drain(..) {
            write_stderr(line.level, &line.message);
        }
    }
    FORWARDED.notify_all();
}

/// The next forwarded record, waiting up to `timeout` for one; `None` when
/// none came (or forwarding is off). Records dropped because the binding
/// fell behind are reported by a warning in their place.
pub fn next_forwarded(timeout: Duration) -> Option<ForwardedLine> {
    let deadline = Instant::now() + timeout;
    let mut forwarding = FORWARDING.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if forwarding.dropped > 0 {
            let dropped = std::mem::take(&mut forwarding.dropped);
            return Some(ForwardedLine {
                level: Level::Warn,
                target: module_path!().into(),
                message: format!("{dropped} log records were dropped: their reader fell behind"),
                rank: None,
            });
        }
        if let Some(line) = forwarding.lines.pop_front() {
            return Some(line);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !forwarding.on {
            return None;
        }
        forwarding = FORWARDED
            .wait_timeout(forwarding, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// horovod-rs's records at or above the level, to standard error or to the
/// binding.
#[derive(Debug)]
pub struct HorovodLogger;

impl Log for HorovodLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= level() && metadata.target().starts_with("horovod")
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let message = record.args().to_string();
        let mut forwarding = FORWARDING.lock().unwrap_or_else(PoisonError::into_inner);
        if !forwarding.on {
            drop(forwarding);
            write_stderr(record.level(), &message);
            return;
        }
        if forwarding.lines.len() == FORWARD_CAPACITY {
            forwarding.lines.pop_front();
            forwarding.dropped += 1;
        }
        forwarding.lines.push_back(ForwardedLine {
            level: record.level(),
            target: record.target().to_string(),
            message,
            rank: engine_thread_rank(),
        });
        FORWARDED.notify_one();
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The rank of the engine thread running this (named `hvd-engine-<rank>`),
/// for records of processes that hold several ranks (a Spark executor).
fn engine_thread_rank() -> Option<usize> {
    std::thread::current()
        .name()?
        .strip_prefix(crate::engine::THREAD_NAME_PREFIX)?
        .parse()
        .ok()
}

/// Writes a record to standard error as the logger does when nothing is
/// forwarded: for a binding whose own logging has nowhere to put it.
pub fn write_stderr(level: impl std::fmt::Display, message: &str) {
    let line = format!(
        "[{}] [horovod-rs {level}] {message}\n",
        utc_time_of_day(SystemTime::now())
    );
    // One write per line, so lines of threads do not interleave.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Installs [`HorovodLogger`] at `level` unless the process already has a
/// logger (say, the host application's); true if this one was installed.
pub fn install_stderr_logger(level: LevelFilter) -> bool {
    let installed = log::set_logger(&HorovodLogger).is_ok();
    if installed {
        set_level(level);
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
    fn only_horovod_records_at_the_level_pass_and_reach_the_binding_in_order() {
        set_level(LevelFilter::Warn);
        let metadata = |level, target| Metadata::builder().level(level).target(target).build();
        assert!(HorovodLogger.enabled(&metadata(Level::Warn, "horovod_core::engine")));
        assert!(!HorovodLogger.enabled(&metadata(Level::Info, "horovod_core::engine")));
        assert!(!HorovodLogger.enabled(&metadata(Level::Error, "cudarc::driver")));

        let record = |level, message: &str| {
            HorovodLogger.log(
                &Record::builder()
                    .level(level)
                    .target("horovod_core::test")
                    .args(format_args!("{message}"))
                    .build(),
            )
        };
        forward(true);
        record(Level::Warn, "first");
        record(Level::Info, "below the level");
        record(Level::Error, "second");
        let take = || next_forwarded(Duration::from_secs(5)).map(|line| (line.level, line.message));
        assert_eq!(take(), Some((Level::Warn, "first".into())));
        assert_eq!(take(), Some((Level::Error, "second".into())));
        assert_eq!(next_forwarded(Duration::from_millis(10)), None);

        // A reader that falls behind loses the oldest records, and is told.
        for i in 0..FORWARD_CAPACITY + 3 {
            record(Level::Warn, &i.to_string());
        }
        let told = take().unwrap();
        assert!(told.1.starts_with("3 log records were dropped"), "{told:?}");
        assert_eq!(take().unwrap().1, "3");
        forward(false);
        assert_eq!(next_forwarded(Duration::from_millis(10)), None);
    }

    #[test]
    fn time_of_day_is_utc_clock_time() {
        let t = UNIX_EPOCH + Duration::from_millis(86_400_000 * 3 + 3_723_045);
        assert_eq!(utc_time_of_day(t), "01:02:03.045");
    }
}
