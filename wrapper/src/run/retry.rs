//! Retries of failed runs: how many (`retries`) and which failures (`retry_on`), said
//! once for the flags (`--retries`, `--retry-on`) and for `runs.toml`, where a run's own
//! setting wins over its sweep's, its sweep's over `[defaults]`, and those over the flags.

use std::fmt;

/// Most extra attempts of one run.
pub const MAX_RETRIES: u32 = 100;

/// Which failures are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOn {
    /// Failures whose output showed a CUDA out-of-memory error.
    Oom,
    /// Any failure or timeout.
    Any,
}

/// What is valid for `retry_on` / `--retry-on`.
pub const RETRY_ON_VALID: &str = "use oom (CUDA out of memory) or any (any failure or timeout)";

impl RetryOn {
    /// `oom` or `any`.
    ///
    /// # Errors
    /// What is wrong and what is valid.
    pub fn parse(s: &str) -> Result<RetryOn, String> {
        match s.trim() {
            "oom" => Ok(RetryOn::Oom),
            "any" => Ok(RetryOn::Any),
            other => Err(format!("{other:?} is not valid; {RETRY_ON_VALID}")),
        }
    }
}

impl fmt::Display for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryOn::Oom => "oom",
            RetryOn::Any => "any",
        })
    }
}

/// A `retries` count from `runs.toml` (any TOML integer).
///
/// # Errors
/// What is wrong and what is valid.
pub fn retries(n: i64) -> Result<u32, String> {
    u32::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_RETRIES)
        .ok_or_else(|| bad_retries(n))
}

/// The error of a `retries` value `shown` (as written) that is no count.
pub fn bad_retries(shown: impl fmt::Display) -> String {
    format!("retries = {shown} is not valid; use a whole number from 0 to {MAX_RETRIES} (extra attempts of a failed run)")
}

/// The error of a `retry_on` value `shown` (as written) that is no text.
pub fn bad_retry_on(shown: impl fmt::Display) -> String {
    format!("retry_on = {shown} is not valid; {RETRY_ON_VALID}")
}

/// The retry rule of one run: its manifest's settings over the flags'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rule {
    /// Extra attempts, where the manifest sets them.
    pub retries: Option<u32>,
    /// Which failures, where the manifest sets it.
    pub on: Option<RetryOn>,
}

impl Rule {
    /// `self` where it says something, else `under` (the next level down).
    pub fn over(self, under: Rule) -> Rule {
        Rule {
            retries: self.retries.or(under.retries),
            on: self.on.or(under.on),
        }
    }

    /// The extra attempts and which failures they cover, the flags' where the manifest
    /// says nothing.
    pub fn with_flags(self, retries: u32, on: RetryOn) -> (u32, RetryOn) {
        (self.retries.unwrap_or(retries), self.on.unwrap_or(on))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_over_its_sweep_over_defaults_over_the_flags() {
        let d = Rule {
            retries: Some(1),
            on: Some(RetryOn::Any),
        };
        let sweep = Rule {
            retries: Some(2),
            on: None,
        };
        let run = Rule {
            retries: None,
            on: Some(RetryOn::Oom),
        };
        assert_eq!(
            run.over(sweep.over(d)).with_flags(5, RetryOn::Any),
            (2, RetryOn::Oom)
        );
        assert_eq!(sweep.over(d).with_flags(5, RetryOn::Oom), (2, RetryOn::Any));
        assert_eq!(
            Rule::default().over(d).with_flags(5, RetryOn::Oom),
            (1, RetryOn::Any)
        );
        assert_eq!(
            Rule::default().with_flags(5, RetryOn::Oom),
            (5, RetryOn::Oom)
        );
    }

    #[test]
    fn values_and_what_is_valid() {
        assert_eq!(RetryOn::parse(" any "), Ok(RetryOn::Any));
        assert_eq!(RetryOn::parse("oom"), Ok(RetryOn::Oom));
        let e = RetryOn::parse("OOM").unwrap_err();
        assert_eq!(
            e,
            "\"OOM\" is not valid; use oom (CUDA out of memory) or any (any failure or timeout)"
        );
        assert_eq!(retries(0), Ok(0));
        assert_eq!(retries(100), Ok(100));
        for bad in [-1, 101, i64::MAX] {
            assert!(retries(bad).unwrap_err().contains("from 0 to 100"), "{bad}");
        }
    }
}
