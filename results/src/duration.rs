//! Durations as users write them, for every flag and manifest key of `colloc run` and
//! `colloc bench`: `90s`, `30m`, `1h30m`, `500ms`, `2h 5m` (humantime), or a plain number
//! of seconds (`90`, `1.5`).

use std::time::Duration;

/// Longest duration colloc accepts (a year): longer ones overflow deadline arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Parse a duration; `allow_zero` for flags where 0 means "none" (a warm-up).
///
/// # Errors
/// One line saying what is valid.
pub fn parse(s: &str, allow_zero: bool) -> Result<Duration, String> {
    let t = s.trim();
    let d = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
        }
        Ok(_) => None,
        Err(_) => humantime::parse_duration(t).ok(),
    };
    match d {
        Some(d) if d.is_zero() && !allow_zero => Err(format!(
            "duration {s:?} is zero; give a time above 0, e.g. 90s, 30m, 2h or 1h30m"
        )),
        Some(d) if d <= MAX_DURATION => Ok(d),
        Some(_) => Err(format!("duration {s:?} is longer than a year")),
        None => Err(format!(
            "invalid duration {s:?}: use e.g. 90s, 30m, 2h, 1h30m, 500ms or a number of seconds"
        )),
    }
}

/// A duration for messages: `1m 30s`, `250ms`.
pub fn show(d: Duration) -> String {
    // Whole milliseconds read better than humantime's nanoseconds.
    let ms = Duration::from_millis(d.as_millis().min(u128::from(u64::MAX)) as u64);
    humantime::format_duration(ms).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse("90", false).unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1.5", false).unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("1h30m", false).unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("500ms", false).unwrap(), Duration::from_millis(500));
        assert_eq!(parse("0s", true).unwrap(), Duration::ZERO);
        assert!(parse("0", false).unwrap_err().contains("zero"));
        for bad in ["", "soon", "-1", "1e30", "10x", "9999999h"] {
            assert!(parse(bad, true).is_err(), "{bad}");
        }
        assert_eq!(show(Duration::from_secs(90)), "1m 30s");
        assert_eq!(show(Duration::from_micros(250_400)), "250ms");
    }
}
