//! `colloc bench` arguments: taken as text by clap, then checked here into a [`Spec`]
//! so every mistake is one line and exit code 2.

use std::path::PathBuf;
use std::time::Duration;

use crate::bad_input;
use crate::engine::scan::Throughput;
use colloc_results::duration;

/// Which GPU: an NVML index or a UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSel {
    /// NVML index.
    Index(u32),
    /// `GPU-…` UUID.
    Uuid(String),
}

impl std::fmt::Display for GpuSel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuSel::Index(i) => write!(f, "{i}"),
            GpuSel::Uuid(u) => f.write_str(u),
        }
    }
}

/// Arguments of `colloc bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
The workload prints its throughput at intervals, e.g. `img/s=1234.5`, `100.0it/s`, timm's
`Rate: N/s` (the same built-in patterns as colloc run; or --metric).
colloc runs it once to warm up (discarded), then alone (solo), then N copies at once under
each mode, and compares aggregate throughput over a window in which all copies run past
--warmup. The search measures each count once first; --repeat R then measures R times
what could still change the answer (every other round in reverse order, opened by the
reference, or by solo without one), and each figure comes with its spread (mean ± 2
standard errors). The solo run opens the search and closes the benchmark. Each copy gets COLLOC_RUN_INDEX,
COLLOC_RUN_NAME and CUDA_VISIBLE_DEVICES.

Examples:
  colloc bench --repeat 2 --budget 30m -- python train.py --batch 128
  colloc bench --reference 'python train.py --batch 896' -- python train.py --batch 128
  colloc bench --compare old/bench.json new/bench.json")]
pub struct BenchArgs {
    /// Modes to try, comma-separated: naive, mps, mig.
    #[arg(long, default_value = "naive,mps,mig", value_name = "LIST")]
    modes: String,
    /// Numbers of copies to run at once: `auto` (along 2, 4, 7, 10, 14, ... from where
    /// the solo run's SM activity puts the answer, up while the aggregate rises by more
    /// than the noise, down while fewer copies do as well, as many as fit in memory), or
    /// a comma-separated list.
    #[arg(long, default_value = "auto", value_name = "auto|LIST")]
    counts: String,
    /// Measure each configuration that could still change the answer this many times
    /// (round-robin, every other round in reverse order); the others once.
    #[arg(long, default_value = "1", value_name = "R")]
    repeat: String,
    /// A command that saturates the GPU in one process (e.g. the same training at 7x the
    /// batch), measured in the same call as a yardstick that does not move with the
    /// host; every configuration is also given as a fraction of it. One string, split as
    /// a shell would.
    #[arg(long, value_name = "CMD")]
    reference: Option<String>,
    /// Plan the configurations to fit this much wall time (e.g. 20m): the search first,
    /// then repeats of what could change the answer; what does not fit is skipped and
    /// named, and an answer the budget cut short says it is a lower bound.
    #[arg(long, value_name = "TIME")]
    budget: Option<String>,
    /// Compare with an earlier bench.json (after measuring), or two reports with each
    /// other (OLD NEW, with no workload); comparisons across hosts are flagged.
    #[arg(long, value_name = "FILE", num_args = 1..=2)]
    compare: Vec<PathBuf>,
    /// Measured time per configuration after warm-up (e.g. 60s, 2m, 1h30m, 500ms).
    #[arg(long, default_value = "60s", value_name = "TIME")]
    duration: String,
    /// Time after every copy's first throughput line before measuring.
    #[arg(long, default_value = colloc_results::rules::solo::DEFAULT_WARMUP, value_name = "TIME")]
    warmup: String,
    /// Longest wait for every copy's first throughput line.
    #[arg(long, default_value = "300s", value_name = "TIME")]
    startup_timeout: String,
    /// Where to write bench.json, bench.csv, bench.png and the copies' logs: a new
    /// directory, or one of yours that holds no earlier results (see --replace).
    #[arg(long, default_value = "colloc-bench", value_name = "DIR")]
    report_dir: PathBuf,
    /// Replace the results of an earlier colloc bench in DIR (its bench.json, CSVs,
    /// chart and logs/) instead of refusing.
    #[arg(long)]
    replace: bool,
    /// Regex for throughput lines; the number is group `value` or the first group
    /// (default: colloc run's built-in patterns).
    #[arg(long, value_name = "REGEX")]
    metric: Option<String>,
    /// The unit of --metric (default: read from the regex).
    #[arg(long, value_name = "UNIT", requires = "metric")]
    unit: Option<String>,
    /// GPU to use: NVML index or GPU UUID (default: the first of CUDA_VISIBLE_DEVICES, else 0).
    #[arg(long, value_name = "GPU")]
    gpu: Option<String>,
    /// Least aggregate gain over solo for collocation to count as paying (it must also
    /// hold at the low end of the measured noise).
    #[arg(long, default_value = "1.1", value_name = "RATIO")]
    min_gain: String,
    /// The workload and its arguments.
    #[arg(last = true, value_name = "CMD")]
    cmd: Vec<String>,
}

/// A collocation mode colloc bench knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchMode {
    /// Plain processes sharing the GPU.
    Naive,
    /// A private MPS daemon.
    Mps,
    /// One MIG instance per copy.
    Mig,
}

impl BenchMode {
    /// Name as written on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            BenchMode::Naive => "naive",
            BenchMode::Mps => "mps",
            BenchMode::Mig => "mig",
        }
    }
}

/// Which counts to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counts {
    /// Grow until the aggregate stops rising ([`super::plan::auto_counts`]).
    Auto,
    /// These, ascending, without repeats.
    List(Vec<usize>),
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Counts::Auto => f.write_str("auto"),
            Counts::List(v) => {
                let s: Vec<String> = v.iter().map(usize::to_string).collect();
                f.write_str(&s.join(","))
            }
        }
    }
}

/// What `colloc bench` was asked to do.
#[derive(Debug, Clone)]
pub enum Task {
    /// Measure (and compare with an earlier report, where given).
    Measure(Box<Spec>),
    /// Compare two reports (old, new) without measuring.
    Compare(PathBuf, PathBuf),
}

/// Checked arguments.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Modes, in the order given, without repeats.
    pub modes: Vec<BenchMode>,
    /// Counts.
    pub counts: Counts,
    /// Measurements of each configuration.
    pub repeat: u32,
    /// The yardstick command.
    pub reference: Option<Vec<String>>,
    /// Wall time to plan for.
    pub budget: Option<Duration>,
    /// An earlier report to compare with.
    pub compare: Option<PathBuf>,
    /// Measured time per configuration.
    pub duration: Duration,
    /// Warm-up.
    pub warmup: Duration,
    /// Wait for first lines.
    pub startup_timeout: Duration,
    /// Output directory.
    pub report_dir: PathBuf,
    /// Replace earlier results there.
    pub replace: bool,
    /// What is read as throughput, and its unit.
    pub throughput: Throughput,
    /// GPU.
    pub gpu: GpuSel,
    /// Least gain.
    pub min_gain: f64,
    /// Workload.
    pub cmd: Vec<String>,
}

/// Most copies colloc bench runs at once.
pub const MAX_COUNT: usize = 64;

/// Most measurements of one configuration.
pub const MAX_REPEAT: u32 = 20;

impl Task {
    /// Check the arguments.
    ///
    /// # Errors
    /// One line per mistake, as bad input.
    pub fn from_args(a: BenchArgs) -> anyhow::Result<Task> {
        if a.cmd.is_empty() {
            return match <[PathBuf; 2]>::try_from(a.compare) {
                Ok([old, new]) => Ok(Task::Compare(old, new)),
                Err(_) => Err(bad_input(
                    "colloc bench needs a workload: colloc bench [OPTIONS] -- CMD [ARGS...] \
                     (or two reports to compare: colloc bench --compare OLD.json NEW.json)",
                )),
            };
        }
        if a.compare.len() > 1 {
            return Err(bad_input(
                "--compare takes one earlier report when a workload is given (two only without one)",
            ));
        }
        let modes = parse_modes(&a.modes).map_err(bad_input)?;
        let counts = parse_counts(&a.counts).map_err(bad_input)?;
        let repeat = parse_repeat(&a.repeat).map_err(bad_input)?;
        let reference = a
            .reference
            .as_deref()
            .map(parse_reference)
            .transpose()
            .map_err(bad_input)?;
        let budget = a
            .budget
            .as_deref()
            .map(|b| duration::parse(b, false))
            .transpose()
            .map_err(|e| bad_input(format!("--budget: {e}")))?;
        let duration = duration::parse(&a.duration, false)
            .map_err(|e| bad_input(format!("--duration: {e}")))?;
        let warmup =
            duration::parse(&a.warmup, true).map_err(|e| bad_input(format!("--warmup: {e}")))?;
        let startup_timeout = duration::parse(&a.startup_timeout, false)
            .map_err(|e| bad_input(format!("--startup-timeout: {e}")))?;
        let throughput = match &a.metric {
            Some(m) => Throughput::custom(m, a.unit.as_deref())
                .map_err(|e| bad_input(format!("--metric: {e}")))?,
            None => Throughput::Builtin,
        };
        let min_gain: f64 = a
            .min_gain
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v > 0.0)
            .ok_or_else(|| {
                bad_input(format!(
                    "--min-gain: expected a positive number such as 1.1, got {:?}",
                    a.min_gain
                ))
            })?;
        let gpu = match a.gpu {
            Some(g) => parse_gpu(&g).ok_or_else(|| {
                bad_input(format!(
                    "--gpu: expected an NVML index or a GPU-… UUID, got {g:?}"
                ))
            })?,
            None => std::env::var(colloc_core::jobenv::VISIBLE)
                .ok()
                .and_then(|v| v.split(',').next().and_then(parse_gpu))
                .unwrap_or(GpuSel::Index(0)),
        };
        Ok(Task::Measure(Box::new(Spec {
            modes,
            counts,
            repeat,
            reference,
            budget,
            compare: a.compare.into_iter().next(),
            duration,
            warmup,
            startup_timeout,
            report_dir: a.report_dir,
            replace: a.replace,
            throughput,
            gpu,
            min_gain,
            cmd: a.cmd,
        })))
    }
}

/// `--repeat`: 1 to [`MAX_REPEAT`].
pub fn parse_repeat(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(r) if (1..=MAX_REPEAT).contains(&r) => Ok(r),
        _ => Err(format!(
            "--repeat: expected a whole number from 1 to {MAX_REPEAT}, got {s:?}"
        )),
    }
}

/// `--reference 'CMD ARGS'`: split as a shell would (quotes, backslashes), nothing
/// expanded.
pub fn parse_reference(s: &str) -> Result<Vec<String>, String> {
    match shlex::split(s) {
        Some(v) if !v.is_empty() => Ok(v),
        Some(_) => Err("--reference: the command is empty; give it as one string, e.g. --reference 'python train.py --batch 896'".into()),
        None => Err(format!(
            "--reference: {s:?} has an unclosed quote or a trailing backslash; give the command as one string, e.g. --reference 'python train.py --batch 896'"
        )),
    }
}

fn parse_gpu(s: &str) -> Option<GpuSel> {
    let s = s.trim();
    if let Ok(i) = s.parse::<u32>() {
        return Some(GpuSel::Index(i));
    }
    (s.starts_with("GPU-") && s.len() > 4).then(|| GpuSel::Uuid(s.to_string()))
}

/// `naive,mps,mig` in any order and subset.
pub fn parse_modes(s: &str) -> Result<Vec<BenchMode>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let m = match part.trim() {
            "naive" => BenchMode::Naive,
            "mps" => BenchMode::Mps,
            "mig" => BenchMode::Mig,
            other => {
                return Err(format!(
                    "--modes: unknown mode {other:?}; valid: naive, mps, mig (comma-separated)"
                ))
            }
        };
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// `auto`, or `1,2,3,7`: positive, at most [`MAX_COUNT`]; a list is returned sorted and
/// without repeats.
pub fn parse_counts(s: &str) -> Result<Counts, String> {
    if s.trim() == "auto" {
        return Ok(Counts::Auto);
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let n: usize = part.trim().parse().map_err(|_| {
            format!("--counts: {part:?} is not a number; write auto, or a list such as 1,2,4,7")
        })?;
        if n == 0 || n > MAX_COUNT {
            return Err(format!(
                "--counts: {n} is out of range; each count must be 1 to {MAX_COUNT}"
            ));
        }
        out.push(n);
    }
    out.sort_unstable();
    out.dedup();
    Ok(Counts::List(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_the_same_as_colloc_runs() {
        let parse = |s: &str| duration::parse(s, false);
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1.5").unwrap(), Duration::from_millis(1500));
        assert!(duration::parse("0s", true).is_ok());
    }

    #[test]
    fn counts_and_modes() {
        assert_eq!(
            parse_counts("7,1, 3,3").unwrap(),
            Counts::List(vec![1, 3, 7])
        );
        assert_eq!(parse_counts(" auto").unwrap(), Counts::Auto);
        assert_eq!(Counts::List(vec![1, 2]).to_string(), "1,2");
        assert!(parse_counts("automatic")
            .unwrap_err()
            .contains("write auto"));
        assert_eq!(parse_repeat("2"), Ok(2));
        assert!(parse_repeat("0").unwrap_err().contains("1 to 20"));
        assert!(parse_repeat("x").is_err());
        assert_eq!(
            parse_reference("python 't.py' --batch \"8 96\"").unwrap(),
            ["python", "t.py", "--batch", "8 96"]
        );
        assert!(parse_reference("  ").unwrap_err().contains("empty"));
        assert!(parse_reference("python 'x")
            .unwrap_err()
            .contains("unclosed"));
        assert!(parse_counts("0").unwrap_err().contains("1 to 64"));
        assert!(parse_counts("1,,2").unwrap_err().contains("not a number"));
        assert_eq!(
            parse_modes("mps,naive,mps").unwrap(),
            vec![BenchMode::Mps, BenchMode::Naive]
        );
        assert!(parse_modes("gpu")
            .unwrap_err()
            .contains("valid: naive, mps, mig"));
    }

    #[test]
    fn gpus() {
        assert_eq!(parse_gpu("1"), Some(GpuSel::Index(1)));
        assert_eq!(parse_gpu("GPU-abc"), Some(GpuSel::Uuid("GPU-abc".into())));
        assert_eq!(parse_gpu("MIG-abc"), None);
    }
}
