//! The formats a setting's value comes in, and how the docs write a default.
//!
//! Spark conf keys take Spark's formats, as `SparkConf.getTimeAsMs` and
//! `getSizeAsBytes` read them: a whole number with a unit (`600s`, `5min`,
//! `500ms`; `128m`, `1g`), a bare number meaning milliseconds or bytes.
//! Horovod's variables take Horovod's: plain numbers of seconds,
//! milliseconds or bytes, switches as `1` and `0`.

/// Why a value was refused, for an error that names the key or variable.
pub(super) type Reason = &'static str;

/// Spark's time units, in microseconds (Spark's `JavaUtils.timeSuffixes`).
const TIME_UNITS_US: &[(&str, u64)] = &[
    ("us", 1),
    ("ms", 1_000),
    ("s", 1_000_000),
    ("m", 60_000_000),
    ("min", 60_000_000),
    ("h", 3_600_000_000),
    ("d", 86_400_000_000),
];

/// Spark's size units, in bytes (Spark's `JavaUtils.byteSuffixes`: binary).
const SIZE_UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("k", 1 << 10),
    ("kb", 1 << 10),
    ("m", 1 << 20),
    ("mb", 1 << 20),
    ("g", 1 << 30),
    ("gb", 1 << 30),
    ("t", 1 << 40),
    ("tb", 1 << 40),
    ("p", 1 << 50),
    ("pb", 1 << 50),
];

/// A time in Spark's format as whole milliseconds (truncated, as Spark's
/// `getTimeAsMs`); `None` when it is not one.
pub(super) fn spark_millis(value: &str) -> Option<u64> {
    let (number, unit) = number_and_unit(value)?;
    let per_us = match unit.as_str() {
        "" => 1_000,
        unit => TIME_UNITS_US.iter().find(|(name, _)| *name == unit)?.1,
    };
    Some(number.checked_mul(per_us)? / 1_000)
}

/// A size in Spark's format as bytes (Spark's `getSizeAsBytes`); `None`
/// when it is not one.
pub(super) fn spark_bytes(value: &str) -> Option<u64> {
    let (number, unit) = number_and_unit(value)?;
    let per_unit = match unit.as_str() {
        "" => 1,
        unit => SIZE_UNITS.iter().find(|(name, _)| *name == unit)?.1,
    };
    number.checked_mul(per_unit)
}

/// A switch as Spark's `getBoolean` reads it: `true` or `false`, in any case.
pub(super) fn spark_switch(value: &str) -> Option<bool> {
    match lower(value).as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// A whole number and the letters after it, lowercase: Spark's
/// `(-?[0-9]+)([a-z]+)?` without the sign, which no setting takes.
fn number_and_unit(value: &str) -> Option<(u64, String)> {
    let value = lower(value);
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(digits);
    if number.is_empty() || !unit.chars().all(|c| c.is_ascii_lowercase()) {
        return None;
    }
    Some((number.parse().ok()?, unit.to_string()))
}

/// Whether a Horovod switch (`HOROVOD_RS_TLS`) is on: `1`, `true`, `yes`
/// or `on` are; empty, `0`, `false`, `no` or `off` are not; `None` for
/// anything else.
pub(super) fn horovod_switch(value: &str) -> Option<bool> {
    match lower(value).as_str() {
        "" | "0" | "false" | "no" | "off" => Some(false),
        "1" | "true" | "yes" | "on" => Some(true),
        _ => None,
    }
}

/// A plain finite number, as Horovod's variables hold them.
pub(super) fn number(value: &str) -> Option<f64> {
    value.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A plain non-negative whole number.
pub(super) fn count(value: &str) -> Option<u64> {
    value.trim().parse::<u64>().ok()
}

/// Milliseconds as the docs write a Spark time: `600s`, `1ms`.
pub(super) fn time_text(millis: u64) -> String {
    if millis.is_multiple_of(1_000) {
        format!("{}s", millis / 1_000)
    } else {
        format!("{millis}ms")
    }
}

/// Bytes as the docs write a Spark size: `128m`, `64k`, `100`.
pub(super) fn size_text(bytes: u64) -> String {
    [("g", 1u64 << 30), ("m", 1 << 20), ("k", 1 << 10)]
        .iter()
        .find(|(_, unit)| bytes != 0 && bytes.is_multiple_of(*unit))
        .map_or_else(
            || bytes.to_string(),
            |(name, unit)| format!("{}{name}", bytes / unit),
        )
}

fn lower(value: &str) -> String {
    value.trim().to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_times_read_as_get_time_as_ms_reads_them() {
        for (text, millis) in [
            ("600s", 600_000),
            ("5min", 300_000),
            ("2m", 120_000),
            ("500ms", 500),
            ("1500us", 1),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("250", 250),
            (" 10S ", 10_000),
            ("0", 0),
        ] {
            assert_eq!(spark_millis(text), Some(millis), "{text}");
        }
        for text in [
            "",
            "s",
            "1.5s",
            "-1s",
            "10 s",
            "10sec",
            "ten",
            "99999999999999999999d",
        ] {
            assert_eq!(spark_millis(text), None, "{text}");
        }
    }

    #[test]
    fn spark_sizes_read_as_get_size_as_bytes_reads_them() {
        for (text, bytes) in [
            ("128m", 128 << 20),
            ("64MB", 64 << 20),
            ("1g", 1 << 30),
            ("4k", 4096),
            ("100", 100),
            ("7b", 7),
            ("0", 0),
        ] {
            assert_eq!(spark_bytes(text), Some(bytes), "{text}");
        }
        for text in ["", "1.5g", "-1", "12 m", "12q", "99999p"] {
            assert_eq!(spark_bytes(text), None, "{text}");
        }
    }

    #[test]
    fn switches_take_their_formats_spelling() {
        assert_eq!(spark_switch(" TRUE "), Some(true));
        assert_eq!(spark_switch("false"), Some(false));
        assert_eq!(spark_switch("1"), None);
        assert_eq!(horovod_switch("yes"), Some(true));
        assert_eq!(horovod_switch(""), Some(false));
        assert_eq!(horovod_switch("maybe"), None);
    }

    #[test]
    fn defaults_are_written_in_spark_formats() {
        assert_eq!(time_text(600_000), "600s");
        assert_eq!(time_text(1), "1ms");
        assert_eq!(time_text(1_500), "1500ms");
        assert_eq!(size_text(128 << 20), "128m");
        assert_eq!(size_text(2 << 30), "2g");
        assert_eq!(size_text(4096), "4k");
        assert_eq!(size_text(1000), "1000");
        assert_eq!(size_text(0), "0");
    }
}
