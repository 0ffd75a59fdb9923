//! `colloc status --cluster --since DATE [--until DATE]`: what colloc jobs did over a
//! period, for the admin asking "did collocation pay on my cluster this month?". Read
//! from Slurm's accounting: `sacct` lists every job of the period with its GPUs, length
//! and `AdminComment`, where the batch step wrote each colloc job's summary
//! (`colloc_core::jobsummary`). The answer ([`Period`]) is per mode kind: jobs, users,
//! GPU-hours, the packs that reported, their runs, runs per GPU-hour, energy, and the
//! share of all GPU-hours of the period that colloc jobs held.
//!
//! `runs per GPU-hour` counts only jobs whose packs reported (their runs over their
//! GPU-hours): a colloc job that ran no `colloc run` says nothing about runs. The runs
//! and energy are what the jobs' own `colloc run`s reported; mode, GPUs and hours are
//! Slurm's and root's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use colloc_core::jobsummary::{self, JobSummary};
use serde::Serialize;

use colloc_results::output::{Exporter, Formats, Json};

/// The formats of `colloc status --cluster --since`.
pub const PERIOD_FORMATS: Formats<Period> = Formats {
    command: "colloc status --cluster --since",
    list: &[&Text, &Json::SORTED],
};

/// `sacct`'s field separator here: the ASCII unit separator, which no field holds.
pub const SEP: char = '\u{1f}';
/// The fields asked of `sacct`, `AdminComment` last (so that it may hold anything).
pub const FIELDS: &str = "JobIDRaw,User,State,ElapsedRaw,AllocTRES,AdminComment";

/// The `sacct` arguments for a period.
pub fn sacct_args(since: &str, until: &str) -> Vec<String> {
    vec![
        "-a".into(),
        "-X".into(),
        "-n".into(),
        "-P".into(),
        format!("--delimiter={SEP}"),
        "-S".into(),
        since.into(),
        "-E".into(),
        until.into(),
        "-o".into(),
        FIELDS.into(),
    ]
}

/// A date as `sacct -S/-E` and this command take it: `YYYY-MM-DD`, optionally with
/// `THH:MM` or `THH:MM:SS`, or `now`.
///
/// # Errors
/// One line saying what is valid.
pub fn check_date(flag: &str, s: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "{flag} {s:?} is not a date: use YYYY-MM-DD, YYYY-MM-DDTHH:MM, \
             YYYY-MM-DDTHH:MM:SS or now"
        )
    };
    if s == "now" {
        return Ok(s.into());
    }
    let (day, time) = s.split_once('T').unwrap_or((s, ""));
    let nums = |part: &str, sep: char, lens: &[usize]| -> Option<Vec<u32>> {
        let f: Vec<&str> = part.split(sep).collect();
        (f.len() == lens.len()
            && f.iter()
                .zip(lens)
                .all(|(x, &l)| x.len() == l && x.bytes().all(|b| b.is_ascii_digit())))
        .then(|| f.iter().map(|x| x.parse().unwrap_or(0)).collect())
    };
    let d = nums(day, '-', &[4, 2, 2]).ok_or_else(bad)?;
    if !(1..=12).contains(&d[1]) || !(1..=31).contains(&d[2]) {
        return Err(bad());
    }
    if !time.is_empty() {
        let t = nums(time, ':', &[2, 2])
            .or_else(|| nums(time, ':', &[2, 2, 2]))
            .ok_or_else(bad)?;
        if t[0] > 23 || t[1] > 59 || t.get(2).is_some_and(|&x| x > 59) {
            return Err(bad());
        }
    } else if s.contains('T') {
        return Err(bad());
    }
    Ok(s.into())
}

/// One job as `sacct` listed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Job id.
    pub job: String,
    /// User name.
    pub user: String,
    /// Slurm state (`COMPLETED`, `CANCELLED by 0`, …).
    pub state: String,
    /// Seconds it ran.
    pub elapsed_s: u64,
    /// GPUs allocated (`gres/gpu=` of `AllocTRES`).
    pub gpus: u64,
    /// Its colloc summary, where its `AdminComment` has one; `Err` for a word that could
    /// not be read.
    pub summary: Option<Result<JobSummary, String>>,
}

/// The GPUs of an `AllocTRES` list: `gres/gpu=N`, else the sum of typed `gres/gpu:T=N`.
fn gpus_of(tres: &str) -> u64 {
    let mut plain = None;
    let mut typed = 0u64;
    for item in tres.split(',') {
        let Some((k, v)) = item.split_once('=') else {
            continue;
        };
        let n = v.parse::<u64>().unwrap_or(0);
        if k == "gres/gpu" {
            plain = Some(n);
        } else if k.starts_with("gres/gpu:") {
            typed += n;
        }
    }
    plain.unwrap_or(typed)
}

/// Parse `sacct` output for [`sacct_args`]: one job a line; lines that are not a job
/// (too few fields) are skipped.
pub fn parse_sacct(out: &str) -> Vec<Row> {
    out.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.splitn(6, SEP).collect();
            if f.len() < 6 {
                return None;
            }
            let summary = jobsummary::split_comment(f[5]).1.map(|w| {
                JobSummary::decode(w).ok_or_else(|| format!("job {}: unreadable {w:?}", f[0]))
            });
            Some(Row {
                job: f[0].to_string(),
                user: f[1].to_string(),
                state: f[2].to_string(),
                elapsed_s: f[3].trim().parse().unwrap_or(0),
                gpus: gpus_of(f[4]),
                summary,
            })
        })
        .collect()
}

/// The figures of one mode kind (or of all).
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct Totals {
    /// `naive`, `mps`, `mig`, `mig+mps`, or `all`.
    pub mode: String,
    /// Jobs.
    pub jobs: u64,
    /// Distinct users.
    pub users: u64,
    /// GPUs × hours they held.
    pub gpu_hours: f64,
    /// Jobs whose packs reported.
    pub reported_jobs: u64,
    /// Their GPU-hours.
    pub reported_gpu_hours: f64,
    /// Packs reported.
    pub packs: u64,
    /// Runs that succeeded.
    pub runs_ok: u64,
    /// Runs that failed.
    pub runs_failed: u64,
    /// `runs_ok / reported_gpu_hours`, where there are any.
    pub runs_per_gpu_hour: Option<f64>,
    /// Energy the packs reported, joules (over those that measured it).
    pub energy_j: Option<f64>,
}

/// The period's answer.
#[derive(Debug, Serialize)]
pub struct Period {
    /// `--since` as given.
    pub since: String,
    /// `--until` as given (`now` by default).
    pub until: String,
    /// Jobs with GPUs in the period, colloc's or not.
    pub gpu_jobs: u64,
    /// Their GPU-hours.
    pub gpu_hours: f64,
    /// Every colloc job.
    pub colloc: Totals,
    /// Per mode kind, in the order naive, mps, mig, mig+mps.
    pub by_mode: Vec<Totals>,
    /// Summaries that could not be read, one line each.
    pub unreadable: Vec<String>,
}

/// The kind of a mode string: `naive`, `mps`, `mig`, `mig+mps`.
fn kind(mode: &str) -> String {
    if mode.starts_with("mig") {
        if mode.contains(":mps") {
            "mig+mps".into()
        } else {
            "mig".into()
        }
    } else {
        mode.split(':').next().unwrap_or(mode).to_string()
    }
}

impl Period {
    /// Fold `sacct`'s rows.
    pub fn new(since: &str, until: &str, rows: &[Row]) -> Period {
        let mut groups: BTreeMap<String, (Totals, BTreeSet<String>)> = BTreeMap::new();
        let mut all = (Totals::default(), BTreeSet::new());
        let (mut gpu_jobs, mut gpu_hours) = (0u64, 0f64);
        let mut unreadable = Vec::new();
        for r in rows {
            let hours = r.gpus as f64 * r.elapsed_s as f64 / 3600.0;
            if r.gpus > 0 {
                gpu_jobs += 1;
                gpu_hours += hours;
            }
            let s = match &r.summary {
                None => continue,
                Some(Err(e)) => {
                    unreadable.push(e.clone());
                    continue;
                }
                Some(Ok(s)) => s,
            };
            let g = groups.entry(kind(&s.mode)).or_default();
            for (t, users) in [(&mut g.0, &mut g.1), (&mut all.0, &mut all.1)] {
                add(t, s, hours);
                users.insert(r.user.clone());
            }
        }
        let finish = |(mut t, users): (Totals, BTreeSet<String>), mode: &str| {
            t.mode = mode.to_string();
            t.users = users.len() as u64;
            t.runs_per_gpu_hour =
                (t.reported_gpu_hours > 0.0).then(|| t.runs_ok as f64 / t.reported_gpu_hours);
            t
        };
        let order = ["naive", "mps", "mig", "mig+mps"];
        let mut by_mode: Vec<Totals> = order
            .iter()
            .filter_map(|k| groups.remove(*k).map(|g| finish(g, k)))
            .collect();
        by_mode.extend(groups.into_iter().map(|(k, g)| finish(g, &k)));
        Period {
            since: since.into(),
            until: until.into(),
            gpu_jobs,
            gpu_hours,
            colloc: finish(all, "all"),
            by_mode,
            unreadable,
        }
    }
}

fn add(t: &mut Totals, s: &JobSummary, hours: f64) {
    t.jobs += 1;
    t.gpu_hours += hours;
    if s.packs > 0 {
        t.reported_jobs += 1;
        t.reported_gpu_hours += hours;
        t.packs += u64::from(s.packs);
        t.runs_ok += s.ok;
        t.runs_failed += s.failed;
    }
    if let Some(e) = s.energy_j {
        t.energy_j = Some(t.energy_j.unwrap_or(0.0) + e);
    }
}

/// The table.
pub struct Text;

fn energy(j: Option<f64>) -> String {
    match j {
        None => "-".into(),
        Some(j) if j >= 1e9 => format!("{:.2} GJ", j / 1e9),
        Some(j) if j >= 1e6 => format!("{:.2} MJ", j / 1e6),
        Some(j) if j >= 1e3 => format!("{:.1} kJ", j / 1e3),
        Some(j) => format!("{j:.0} J"),
    }
}

impl Exporter<Period> for Text {
    fn name(&self) -> &'static str {
        "text"
    }

    fn render(&self, p: &Period) -> anyhow::Result<String> {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "colloc jobs from {} to {}, from Slurm's accounting",
            p.since, p.until
        );
        let c = &p.colloc;
        if c.jobs == 0 {
            let _ = writeln!(
                t,
                "no colloc job in the period ({} GPU jobs, {:.1} GPU-hours in all)",
                p.gpu_jobs, p.gpu_hours
            );
        } else {
            let share = if p.gpu_hours > 0.0 {
                format!(" ({:.1} %)", 100.0 * c.gpu_hours / p.gpu_hours)
            } else {
                String::new()
            };
            let _ = writeln!(
                t,
                "{} colloc jobs of {} users held {:.1} of the {:.1} GPU-hours of all {} GPU jobs{share}",
                c.jobs, c.users, c.gpu_hours, p.gpu_hours, p.gpu_jobs
            );
            let header = [
                "MODE",
                "JOBS",
                "USERS",
                "GPU-HOURS",
                "REPORTED",
                "PACKS",
                "RUNS OK",
                "FAILED",
                "RUNS/GPU-HOUR",
                "ENERGY",
            ];
            let cells: Vec<Vec<String>> = p
                .by_mode
                .iter()
                .chain(std::iter::once(c))
                .map(|m| {
                    vec![
                        m.mode.clone(),
                        m.jobs.to_string(),
                        m.users.to_string(),
                        format!("{:.1}", m.gpu_hours),
                        m.reported_jobs.to_string(),
                        m.packs.to_string(),
                        m.runs_ok.to_string(),
                        m.runs_failed.to_string(),
                        m.runs_per_gpu_hour
                            .map_or("-".into(), |r| format!("{r:.1}")),
                        energy(m.energy_j),
                    ]
                })
                .collect();
            table(&mut t, &header, &cells);
            let _ = writeln!(
                t,
                "REPORTED: jobs whose colloc run packs reported; RUNS/GPU-HOUR is over their GPU-hours"
            );
        }
        for u in &p.unreadable {
            let _ = writeln!(t, "note: {u}");
        }
        Ok(colloc_results::text::escape_lines(&t).into_owned())
    }
}

/// Columns as wide as their widest cell, two spaces apart; numbers right-aligned.
fn table(t: &mut String, header: &[&str], cells: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in cells {
        for (w, v) in width.iter_mut().zip(row) {
            *w = (*w).max(v.chars().count());
        }
    }
    let line = |t: &mut String, row: &[String]| {
        let s: Vec<String> = row
            .iter()
            .zip(&width)
            .enumerate()
            .map(|(i, (v, w))| {
                if i == 0 {
                    format!("{v:<w$}")
                } else {
                    format!("{v:>w$}")
                }
            })
            .collect();
        let _ = writeln!(t, "{}", s.join("  ").trim_end());
    };
    line(
        t,
        &header.iter().map(|h| (*h).to_string()).collect::<Vec<_>>(),
    );
    for row in cells {
        line(t, row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(job: &str, user: &str, elapsed: u64, tres: &str, comment: &str) -> String {
        format!("{job}{SEP}{user}{SEP}COMPLETED{SEP}{elapsed}{SEP}{tres}{SEP}{comment}\n")
    }

    #[test]
    fn dates_are_checked_before_sacct_runs() {
        for ok in [
            "2026-11-01",
            "2026-11-01T08:30",
            "2026-11-01T08:30:59",
            "now",
        ] {
            assert_eq!(check_date("--since", ok).as_deref(), Ok(ok));
        }
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-1-01",
            "2026-11-01T",
            "2026-11-01T24:00",
            "2026-11-01T08:60",
            "2026-11-01 08:00",
            "-S",
            "2026-11-01T08:30:00:00",
            "now-1days",
        ] {
            let e = check_date("--since", bad).unwrap_err();
            assert!(
                e.contains("YYYY-MM-DD") && e.contains("--since"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_period_folds_jobs_by_mode_with_known_figures() {
        let out = [
            // mps, 2 GPUs for 1 h, a pack: 30 ok, 2 failed, 3.6 MJ.
            line(
                "10", "ana", 3600, "billing=4,cpu=4,gres/gpu=2,mem=8G,node=1",
                "colloc/1;mode=mps:4;gpus=2;packs=1;ok=30;failed=2;steady=900;unit=img/s;energy_j=3600000",
            ),
            // mps, 1 GPU for 30 min, no pack (an admin's text beside).
            line("11", "bo", 1800, "gres/gpu:a100=1,node=1", "JS1:xyz colloc/1;mode=mps;gpus=1"),
            // mig, 1 GPU for 2 h, two packs: 10 ok.
            line(
                "12", "ana", 7200, "gres/gpu=1",
                "colloc/1;mode=mig:3g,3g;gpus=1;packs=2;ok=10;failed=0",
            ),
            // mig with MPS on its instances, 1 GPU for 1 h.
            line("13", "cy", 3600, "gres/gpu=1", "colloc/1;mode=mig:1g:mps:2;gpus=1;packs=1;ok=4;failed=0"),
            // A plain GPU job for 4 h, and a CPU job.
            line("14", "dee", 14400, "gres/gpu=1,node=1", ""),
            line("15", "dee", 600, "cpu=1,node=1", ""),
            // A word this version cannot read, and a short line.
            line("16", "eve", 60, "gres/gpu=1", "colloc/1;mode=mps;gpus=x"),
            "garbage\n".into(),
        ]
        .concat();
        let rows = parse_sacct(&out);
        assert_eq!(rows.len(), 7);
        assert_eq!(rows[1].gpus, 1);
        let p = Period::new("2026-11-01", "now", &rows);
        assert_eq!(p.gpu_jobs, 6);
        // 2 + 0.5 + 2 + 1 + 4 + 1/60 GPU-hours.
        assert!(
            (p.gpu_hours - (9.5 + 1.0 / 60.0)).abs() < 1e-9,
            "{}",
            p.gpu_hours
        );
        let modes: Vec<&str> = p.by_mode.iter().map(|m| m.mode.as_str()).collect();
        assert_eq!(modes, ["mps", "mig", "mig+mps"]);
        let mps = &p.by_mode[0];
        assert_eq!(
            (mps.jobs, mps.users, mps.reported_jobs, mps.packs),
            (2, 2, 1, 1)
        );
        assert!((mps.gpu_hours - 2.5).abs() < 1e-9);
        assert_eq!((mps.runs_ok, mps.runs_failed), (30, 2));
        // 30 runs over the reporting job's 2 GPU-hours.
        assert_eq!(mps.runs_per_gpu_hour, Some(15.0));
        assert_eq!(mps.energy_j, Some(3_600_000.0));
        let all = &p.colloc;
        assert_eq!((all.jobs, all.users, all.runs_ok, all.packs), (4, 3, 44, 4));
        assert!((all.gpu_hours - 5.5).abs() < 1e-9);
        // 44 runs over 2 + 2 + 1 reported GPU-hours.
        assert_eq!(all.runs_per_gpu_hour, Some(44.0 / 5.0));
        assert_eq!(p.unreadable.len(), 1, "{:?}", p.unreadable);
        let text = Text.render(&p).unwrap();
        assert!(
            text.contains(
                "4 colloc jobs of 3 users held 5.5 of the 9.5 GPU-hours of all 6 GPU jobs (57.8 %)"
            ),
            "{text}"
        );
        let all_line = text.lines().find(|l| l.starts_with("all ")).unwrap();
        let cols: Vec<&str> = all_line.split_whitespace().collect();
        assert_eq!(
            cols,
            ["all", "4", "3", "5.5", "3", "4", "44", "2", "8.8", "3.60", "MJ"]
        );
        assert!(text.contains("note: job 16: unreadable"), "{text}");
    }

    #[test]
    fn a_period_without_colloc_jobs_says_so() {
        let rows = parse_sacct(&line("1", "a", 3600, "gres/gpu=2", ""));
        let text = Text
            .render(&Period::new("2026-11-01", "2026-12-01", &rows))
            .unwrap();
        assert!(
            text.contains("no colloc job in the period (1 GPU jobs, 2.0 GPU-hours in all)"),
            "{text}"
        );
    }
}
