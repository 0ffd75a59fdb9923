//! `colloc bench` arguments: taken as text by clap, then checked here into a [`Spec`]
//! so every mistake is one line and exit code 2.

use std::path::PathBuf;
use std::time::Duration;

use super::gpu::GpuSel;
use super::metric::{Metric, DEFAULT_METRIC};
use crate::bad_input;

/// Arguments of `colloc bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
The workload prints its throughput at intervals, e.g. `img/s=1234.5` (see --metric).
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
    /// Measured time per configuration after warm-up (e.g. 60s, 2m, 500ms).
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
    /// Regex for throughput lines; the number is group `value` or the first group.
    #[arg(long, value_name = "REGEX")]
    metric: Option<String>,
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
    /// Pattern as given (or the default).
    pub metric_pattern: String,
    /// Compiled pattern.
    pub metric: Metric,
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
        let duration =
            parse_duration(&a.duration).map_err(|e| bad_input(format!("--duration: {e}")))?;
        if duration.is_zero() {
            return Err(bad_input("--duration must be more than 0"));
        }
        let warmup = parse_duration(&a.warmup).map_err(|e| bad_input(format!("--warmup: {e}")))?;
        let startup_timeout = parse_duration(&a.startup_timeout)
            .map_err(|e| bad_input(format!("--startup-timeout: {e}")))?;
        let metric_pattern = a.metric.unwrap_or_else(|| DEFAULT_METRIC.to_string());
        let metric = Metric::new(&metric_pattern).map_err(bad_input)?;
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
            metric_pattern,
            metric,
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

/// `60s`, `2m`, `1.5h`, `500ms`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => f64::NAN,
    };
    let v: f64 = num.parse().unwrap_or(f64::NAN);
    let secs = v * scale;
    if !(0.0..=7.0 * 86400.0).contains(&secs) {
        return Err(format!(
            "expected a time such as 60s, 2m, 500ms or 1h (at most a week), got {s:?}"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        for bad in ["", "s", "10x", "-1s", "1e3s", "9999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
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
