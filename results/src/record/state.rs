//! How an attempt (one start of a run) ended, as the record and every report name it.

use serde::{Deserialize, Serialize};

/// How an attempt (one start of a run) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Exited 0.
    Succeeded,
    /// Exited non-zero, died of a signal of its own, or could not start.
    Failed,
    /// Hit its timeout and was stopped.
    TimedOut,
    /// Stopped by colloc (a signal to colloc, `--fail-fast`) or by colloc's death before
    /// it finished.
    Interrupted,
    /// Never started (colloc stopped first).
    NotStarted,
    /// Still running (only in a report made while its pack runs).
    Running,
}

impl State {
    /// The name used in the JSON and CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::TimedOut => "timed_out",
            State::Interrupted => "interrupted",
            State::NotStarted => "not_started",
            State::Running => "running",
        }
    }
}
