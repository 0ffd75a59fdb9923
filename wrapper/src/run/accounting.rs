//! What a pack tells its job's summary in Slurm's accounting when it ends
//! (`colloc_core::jobsummary`): its runs that succeeded and failed, its steady aggregate
//! and its energy, on the socket the batch step's slurmstepd (root) listens on and names
//! in `COLLOC_SUMMARY_SOCKET` (a path in `run_dir`, the job's user's alone). Outside a colloc batch job there is no name, and on
//! another node than the batch step's no one listens: then nothing is said.

use colloc_core::jobsummary::{self, PackReport};
use colloc_results::record::model::Report;

/// The line for `report`: a unit `sacct` could not show plainly drops the steady figure.
pub fn pack_report(report: &Report) -> PackReport {
    let s = &report.summary;
    let steady = match (s.steady_throughput, &s.throughput_unit) {
        (Some(v), Some(u)) if v.is_finite() && v >= 0.0 => Some((v, u.clone())),
        _ => None,
    };
    let mut r = PackReport {
        ok: s.succeeded as u64,
        failed: (s.failed + s.timed_out) as u64,
        steady,
        energy_j: s.energy_j.filter(|e| e.is_finite() && *e >= 0.0),
    };
    // What root would refuse is left out here, so that the rest still counts.
    if PackReport::parse(r.to_line().as_bytes()).is_err() {
        r.steady = None;
        r.energy_j = None;
    }
    r
}

/// Tell the job's summary (the socket named in `COLLOC_SUMMARY_SOCKET`, which the
/// batch step gives its tasks) what this pack did; a failure is a log line.
pub fn tell(report: &Report) {
    let Some(path) = std::env::var(jobsummary::SOCKET_ENV)
        .ok()
        .filter(|p| jobsummary::is_socket_path(p))
    else {
        return;
    };
    let r = pack_report(report);
    match jobsummary::send(std::path::Path::new(&path), &r) {
        Ok(true) => log::debug!(
            "the job's accounting summary told: {}",
            r.to_line().trim_end()
        ),
        Ok(false) => {}
        Err(e) => log::warn!("the job's accounting summary was not told what this pack did: {e}"),
    }
}
