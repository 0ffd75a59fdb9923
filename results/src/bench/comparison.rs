//! The comparison of two bench reports as bench.json records it (`"comparison"`): what
//! [`super::compare`] finds and [`super::report::Report`] holds, apart from both so that
//! neither imports the other.

use serde::{Deserialize, Serialize};

/// One configuration in both reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CellChange {
    /// Mode.
    pub mode: String,
    /// Copies.
    pub n: usize,
    /// Aggregate in the old report.
    pub old: f64,
    /// Aggregate in the new report.
    pub new: f64,
    /// `new / old - 1`.
    pub change: f64,
    /// Is the change larger than the noise of both (where both reports know theirs)?
    pub beyond_noise: Option<bool>,
    /// Old `vs_solo`.
    pub old_vs_solo: Option<f64>,
    /// New `vs_solo`.
    pub new_vs_solo: Option<f64>,
    /// Old `vs_reference`.
    pub old_vs_reference: Option<f64>,
    /// New `vs_reference`.
    pub new_vs_reference: Option<f64>,
}

/// The comparison of two reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Comparison {
    /// The earlier report's path, as given.
    pub old: String,
    /// Its schema.
    pub old_schema: u64,
    /// Same host as far as both reports say; `None` where one has no host record.
    pub same_host: Option<bool>,
    /// What differs between the hosts.
    pub host_differences: Vec<String>,
    /// Configurations measured in both.
    pub cells: Vec<CellChange>,
    /// The old recommendation (`mps 7, 7.41x solo`).
    pub old_recommendation: Option<String>,
    /// The new recommendation.
    pub new_recommendation: Option<String>,
    /// The text printed.
    pub text: String,
}
