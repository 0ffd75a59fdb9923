//! How busy one copy keeps the GPU, as the solo run showed it, and what says so (below
//! both the bench command's plan, which starts `--counts auto` from it, and [`super::report`],
//! which records it, so neither imports the other for it).

use serde::{Deserialize, Serialize};

/// What a measurement's SM busy share was read from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BusySource {
    /// GPM's SM activity (Hopper and later): the share of the SMs busy, so a copy that
    /// fills a seventh of the GPU reads about 14 %.
    Gpm,
    /// NVML's SM utilization of the copies' own processes: a share of time in which any
    /// of their kernels ran, however few SMs it filled.
    ProcessUtil,
    /// The whole GPU's utilization, likewise a share of time.
    GpuUtil,
}

impl BusySource {
    /// How the report names it.
    pub fn describe(self) -> &'static str {
        match self {
            BusySource::Gpm => "SM activity (GPM)",
            BusySource::ProcessUtil => "the copies' own SM utilization",
            BusySource::GpuUtil => "the GPU's utilization",
        }
    }

    /// Left out of bench.json: every source but GPM, so files without GPM stay as they
    /// were.
    pub fn unwritten(s: &Option<BusySource>) -> bool {
        *s != Some(BusySource::Gpm)
    }
}

/// How busy the solo run kept the GPU: what `--counts auto` starts from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    /// Share of the GPU one copy kept busy, 0-1.
    pub share: f64,
    /// What it was read from.
    pub source: BusySource,
    /// GPM's SM occupancy meanwhile, percent, where read.
    pub occupancy: Option<f64>,
}
