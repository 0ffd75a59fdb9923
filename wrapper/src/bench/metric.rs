//! Throughput lines in a workload's output.

use regex::Regex;

/// Matches `img/s=123.4`, `samples/s: 5e3` and the like.
pub const DEFAULT_METRIC: &str =
    r"(?:img|images|samples)/s\s*[=:]\s*(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)";

/// A compiled throughput pattern.
#[derive(Debug, Clone)]
pub struct Metric {
    re: Regex,
    /// Index of the capture group holding the number.
    group: usize,
}

impl Metric {
    /// Compile a pattern: the number is the group named `value`, else the first group.
    ///
    /// # Errors
    /// A one-line message for a bad regex or one without a capture group.
    pub fn new(pattern: &str) -> Result<Metric, String> {
        let re = Regex::new(pattern).map_err(|e| {
            format!(
                "--metric: invalid regex {pattern:?}: {}",
                e.to_string().lines().last().unwrap_or("").trim()
            )
        })?;
        let group = match re.capture_names().position(|n| n == Some("value")) {
            Some(i) => i,
            None if re.captures_len() > 1 => 1,
            None => {
                return Err(format!(
                    "--metric: {pattern:?} has no capture group; write the number as (?P<value>[0-9.]+)"
                ))
            }
        };
        Ok(Metric { re, group })
    }

    /// The throughput on a line, if the line carries one (finite and not negative).
    pub fn parse(&self, line: &str) -> Option<f64> {
        let caps = self.re.captures(line)?;
        let v: f64 = caps.get(self.group)?.as_str().trim().parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pattern_reads_common_forms() {
        let m = Metric::new(DEFAULT_METRIC).unwrap();
        assert_eq!(m.parse("t=12.5 img/s=1234.5 loss=2.3"), Some(1234.5));
        assert_eq!(m.parse("samples/s: 5e3"), Some(5000.0));
        assert_eq!(m.parse("epoch 3 time=12.0s"), None);
        assert_eq!(m.parse("img/s=nan"), None);
    }

    #[test]
    fn custom_pattern_named_or_first_group() {
        let m = Metric::new(r"tok/s (?P<value>\d+)").unwrap();
        assert_eq!(m.parse("tok/s 42"), Some(42.0));
        let m = Metric::new(r"rate=(\S+)").unwrap();
        assert_eq!(m.parse("rate=7.5"), Some(7.5));
        assert_eq!(m.parse("rate=abc"), None);
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        let e = Metric::new("img/s=").unwrap_err();
        assert!(e.contains("no capture group"), "{e}");
        let e = Metric::new("(").unwrap_err();
        assert!(e.starts_with("--metric: invalid regex"), "{e}");
        assert!(!e.contains('\n'));
    }
}
