//! Simulated time: whole milliseconds from the start of a replay.
//!
//! Every clock in the simulator is an integer, so that a replay is exact
//! and repeatable: no float ever decides which of two events comes first.

/// A point in simulated time, or a length of it, in milliseconds.
pub type Time = u64;

/// One second.
pub const SECOND: Time = 1000;

/// Whole seconds as [`Time`].
pub const fn seconds(s: u64) -> Time {
    s * SECOND
}

/// Seconds with a fraction, rounded to the millisecond (negative: 0).
pub fn from_secs_f64(s: f64) -> Time {
    if s.is_finite() && s > 0.0 {
        (s * 1000.0).round() as Time
    } else {
        0
    }
}

/// The time in seconds, for reports.
pub fn as_secs_f64(t: Time) -> f64 {
    t as f64 / 1000.0
}

/// Reads a length: `45.29s`, `17410ms`, `2m`, `1h30m`, `1d`, or a plain
/// number of seconds (`45.29`).
pub fn parse_duration(text: &str) -> Result<Time, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("an empty duration".into());
    }
    if let Ok(s) = t.parse::<f64>() {
        return if s.is_finite() && s >= 0.0 {
            Ok(from_secs_f64(s))
        } else {
            Err(format!("{text:?} is not a duration of zero or more seconds"))
        };
    }
    let mut total = 0.0f64;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{text:?} is not a duration (say 45.29s, 17410ms, 1h30m)"));
        }
        let value: f64 =
            rest[..digits].parse().map_err(|_| format!("{text:?}: {:?} is not a number", &rest[..digits]))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            other => return Err(format!("{text:?}: unknown unit {other:?} (ms, s, m, h, d)")),
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    Ok(from_secs_f64(total))
}

/// `7h 01m` as the seed thesis writes totals (seconds rounded down).
pub fn hours_minutes(t: Time) -> String {
    let s = t / SECOND;
    format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("45.29s"), Ok(45_290));
        assert_eq!(parse_duration("17410ms"), Ok(17_410));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("2"), Ok(2000));
        assert_eq!(parse_duration("0.0005"), Ok(1));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(hours_minutes(seconds(7 * 3600 + 60 + 59)), "7h 01m");
    }
}
