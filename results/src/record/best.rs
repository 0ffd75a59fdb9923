//! Which end of a user metric is its best (a loss: the smallest; an accuracy: the largest),
//! as the record keeps it.

/// Which value of a user metric is its best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Best {
    /// The smallest (loss, error).
    Min,
    /// The largest (accuracy).
    Max,
}

impl Best {
    /// The default for a metric name: `min` for names of losses, errors, perplexities and
    /// times, `max` otherwise.
    pub fn for_name(name: &str) -> Best {
        let n = name.to_ascii_lowercase();
        let lower_is_better = [
            "loss",
            "err",
            "ppl",
            "perplexity",
            "mse",
            "mae",
            "rmse",
            "wer",
            "cer",
            "time",
            "latency",
        ];
        if lower_is_better.iter().any(|k| n.contains(k)) {
            Best::Min
        } else {
            Best::Max
        }
    }

    /// The better of two values.
    pub fn better(self, a: f64, b: f64) -> f64 {
        match self {
            Best::Min => a.min(b),
            Best::Max => a.max(b),
        }
    }
}
