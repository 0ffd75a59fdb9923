//! `colloc bench` arguments: taken as text by clap, then checked here into a [`Spec`]
//! so every mistake is one line and exit code 2.

use std::path::PathBuf;
use std::time::Duration;

use crate::bad_input;
use crate::engine::duration;
use crate::engine::scan::Throughput;

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
colloc runs it alone, then N copies at once under each mode, and compares aggregate
throughput over a window in which all copies run past --warmup. Each copy gets
COLLOC_RUN_INDEX, COLLOC_RUN_NAME and CUDA_VISIBLE_DEVICES.

Example: colloc bench --counts 1,2,4 --duration 30s -- python train.py --model resnet26")]
pub struct BenchArgs {
    /// Modes to try, comma-separated: naive, mps, mig.
    #[arg(long, default_value = "naive,mps,mig", value_name = "LIST")]
    modes: String,
    /// Numbers of copies to run at once, comma-separated.
    #[arg(long, default_value = "1,2,3,7", value_name = "LIST")]
    counts: String,
    /// Measured time per configuration after warm-up (e.g. 60s, 2m, 1h30m, 500ms).
    #[arg(long, default_value = "60s", value_name = "TIME")]
    duration: String,
    /// Time after every copy's first throughput line before measuring.
    #[arg(long, default_value = "10s", value_name = "TIME")]
    warmup: String,
    /// Longest wait for every copy's first throughput line.
    #[arg(long, default_value = "300s", value_name = "TIME")]
    startup_timeout: String,
    /// Where to write bench.json, bench.csv, bench.png and the copies' logs.
    #[arg(long, default_value = "colloc-bench", value_name = "DIR")]
    report_dir: PathBuf,
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
    /// Least aggregate gain over solo for collocation to count as paying.
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

/// Checked arguments.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Modes, in the order given, without repeats.
    pub modes: Vec<BenchMode>,
    /// Counts, ascending, without repeats.
    pub counts: Vec<usize>,
    /// Measured time per configuration.
    pub duration: Duration,
    /// Warm-up.
    pub warmup: Duration,
    /// Wait for first lines.
    pub startup_timeout: Duration,
    /// Output directory.
    pub report_dir: PathBuf,
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

impl Spec {
    /// Check the arguments.
    ///
    /// # Errors
    /// One line per mistake, as bad input.
    pub fn from_args(a: BenchArgs) -> anyhow::Result<Spec> {
        if a.cmd.is_empty() {
            return Err(bad_input(
                "colloc bench needs a workload: colloc bench [OPTIONS] -- CMD [ARGS...]",
            ));
        }
        let modes = parse_modes(&a.modes).map_err(bad_input)?;
        let counts = parse_counts(&a.counts).map_err(bad_input)?;
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
            None => std::env::var("CUDA_VISIBLE_DEVICES")
                .ok()
                .and_then(|v| v.split(',').next().and_then(parse_gpu))
                .unwrap_or(GpuSel::Index(0)),
        };
        Ok(Spec {
            modes,
            counts,
            duration,
            warmup,
            startup_timeout,
            report_dir: a.report_dir,
            throughput,
            gpu,
            min_gain,
            cmd: a.cmd,
        })
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

/// `1,2,3,7`: positive, at most [`MAX_COUNT`]; returned sorted and without repeats.
pub fn parse_counts(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let n: usize = part
            .trim()
            .parse()
            .map_err(|_| format!("--counts: {part:?} is not a number; write e.g. 1,2,3,7"))?;
        if n == 0 || n > MAX_COUNT {
            return Err(format!(
                "--counts: {n} is out of range; each count must be 1 to {MAX_COUNT}"
            ));
        }
        out.push(n);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
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
        assert_eq!(parse_counts("7,1, 3,3").unwrap(), vec![1, 3, 7]);
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
