//! What a run's output says: throughput samples (the manifest's `metric` regex or the
//! built-in patterns of common trainers), epoch numbers, CUDA out-of-memory errors.
//! Pure functions over one line at a time, plus the small accumulators that keep them.

use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;

/// Unit name for samples from a manifest's own `metric` regex.
pub const CUSTOM_UNIT: &str = "metric";

const NUM: &str = r"([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)";

struct Builtin {
    re: Regex,
    unit: &'static str,
    /// `s/it` style: the number is seconds per unit.
    inverse: bool,
}

fn builtins() -> &'static [Builtin] {
    static B: OnceLock<Vec<Builtin>> = OnceLock::new();
    B.get_or_init(|| {
        let mk = |p: String, unit, inverse| Builtin {
            // The patterns are constant and tested below.
            re: Regex::new(&p).unwrap_or_else(|e| panic!("built-in pattern {p}: {e}")),
            unit,
            inverse,
        };
        vec![
            // `img/s=1234.5`, `images/sec: 99`, and tqdm with unit="img": `123.4img/s`
            mk(
                format!(r"(?i)\b(?:img|images)/s(?:ec)?\s*[=:]\s*{NUM}"),
                "img/s",
                false,
            ),
            mk(
                format!(r"(?i)\b{NUM}\s*(?:img|images)/s(?:ec)?\b"),
                "img/s",
                false,
            ),
            // timm: `Rate: 1234.56/s (1200.00/s)`
            mk(format!(r"\bRate:\s*{NUM}/s\b"), "img/s", false),
            // `samples/s=…`, `12.3 samples/s`, HF Trainer's `'train_samples_per_second': 12.3`
            mk(
                format!(r"(?i)\bsamples/s(?:ec)?\s*[=:]\s*{NUM}"),
                "samples/s",
                false,
            ),
            mk(
                format!(r"(?i)\b{NUM}\s*samples/s(?:ec)?\b"),
                "samples/s",
                false,
            ),
            mk(
                format!(r"samples_per_second'?\s*[=:]\s*{NUM}"),
                "samples/s",
                false,
            ),
            // tqdm: `12.34it/s`, or `1.50s/it` for slow loops
            mk(format!(r"\b{NUM}\s?it/s\b"), "it/s", false),
            mk(format!(r"\b{NUM}\s?s/it\b"), "it/s", true),
        ]
    })
}

fn epoch_res() -> &'static [Regex; 2] {
    static E: OnceLock<[Regex; 2]> = OnceLock::new();
    E.get_or_init(|| {
        [
            // `Epoch 3`, `epoch: 3`, `Epoch [3/10]`, `epoch=3`, Keras `Epoch 3/10`
            Regex::new(r"(?i)\bepoch\b[\s:=\[#]*([0-9]+)").unwrap_or_else(|e| panic!("{e}")),
            // timm: `Train: 3 [ 100/1251 ( 8%)]`
            Regex::new(r"\bTrain: ([0-9]+) \[").unwrap_or_else(|e| panic!("{e}")),
        ]
    })
}

fn epoch_time_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    // bench/train.py: `epoch=3 epoch_time=12.34 epoch_img_per_s=…`, printed as it ends.
    R.get_or_init(|| {
        Regex::new(r"\bepoch_time\s*[=:]\s*([0-9]+(?:\.[0-9]+)?)").unwrap_or_else(|e| panic!("{e}"))
    })
}

fn oom_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(
            r"(?i)CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// What one output line says.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LineFacts {
    /// A throughput sample and its unit.
    pub throughput: Option<(f64, &'static str)>,
    /// An epoch number.
    pub epoch: Option<u64>,
    /// The epoch's duration in seconds, where the line states it (`epoch_time=12.3`).
    pub epoch_time: Option<f64>,
    /// A CUDA out-of-memory message.
    pub oom: bool,
}

/// Read one line. With a `metric` regex only it is used for throughput (its `value`
/// group, else group 1); without, the built-in patterns in order.
pub fn scan(line: &str, metric: Option<&Regex>) -> LineFacts {
    let mut f = LineFacts::default();
    // Cheap pre-checks keep the common line (no digits, no keywords) off the regexes.
    if !line.bytes().any(|b| b.is_ascii_digit()) {
        f.oom = line.contains("emory") && oom_re().is_match(line);
        return f;
    }
    f.throughput = match metric {
        Some(re) => re.captures(line).and_then(|c| {
            let m = c.name("value").or_else(|| c.get(1))?;
            let v: f64 = m.as_str().trim().parse().ok()?;
            v.is_finite().then_some((v, CUSTOM_UNIT))
        }),
        None => builtin_throughput(line),
    };
    for re in epoch_res() {
        if let Some(n) = re.captures(line).and_then(|c| c[1].parse().ok()) {
            f.epoch = Some(n);
            break;
        }
    }
    if f.epoch.is_some() && line.contains("epoch_time") {
        f.epoch_time = epoch_time_re()
            .captures(line)
            .and_then(|c| c[1].parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0);
    }
    f.oom = (line.contains("emory") || line.contains("ALLOC") || line.contains("OutOfMemory"))
        && oom_re().is_match(line);
    f
}

fn builtin_throughput(line: &str) -> Option<(f64, &'static str)> {
    if !line.contains('/') && !line.contains("per_second") {
        return None;
    }
    for b in builtins() {
        if let Some(c) = b.re.captures(line) {
            let v: f64 = c[1].parse().ok()?;
            let v = if b.inverse {
                if v > 0.0 {
                    1.0 / v
                } else {
                    continue;
                }
            } else {
                v
            };
            if v.is_finite() {
                return Some((v, b.unit));
            }
        }
    }
    None
}

/// Most samples kept per run; beyond this every other one is dropped (the running
/// sums still see all of them).
pub const MAX_KEPT: usize = 4096;

/// A run's throughput samples.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Series {
    /// Unit of the first sample; samples in another unit are ignored.
    pub unit: Option<&'static str>,
    /// Kept samples: (seconds since the pack started, value).
    pub samples: Vec<(f64, f64)>,
    /// All samples seen.
    pub count: u64,
    sum: f64,
    first: f64,
    /// Largest sample.
    pub max: f64,
    /// Latest sample.
    pub last: f64,
    /// Work done, integrated from the samples: each rate times the time since the
    /// previous sample (a trainer's rate covers the interval before it is printed).
    pub work: f64,
    prev_t: Option<f64>,
    stride: u64,
}

impl Series {
    /// Add a sample seen at `t` seconds.
    pub fn push(&mut self, t: f64, v: f64, unit: &'static str) {
        match self.unit {
            None => self.unit = Some(unit),
            Some(u) if u != unit => return,
            Some(_) => {}
        }
        if self.count == 0 {
            self.first = v;
            self.max = v;
            self.stride = 1;
        }
        if let Some(pt) = self.prev_t {
            self.work += v * (t - pt).max(0.0);
        }
        self.prev_t = Some(t);
        self.count += 1;
        self.sum += v;
        self.max = self.max.max(v);
        self.last = v;
        if self.count.is_multiple_of(self.stride.max(1)) {
            self.samples.push((t, v));
            if self.samples.len() >= MAX_KEPT {
                let mut i = 0;
                self.samples.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride = self.stride.max(1) * 2;
            }
        }
    }

    /// The run's throughput: the mean of its samples, leaving out the first when there
    /// are three or more (it usually includes start-up and autotuning).
    pub fn mean(&self) -> Option<f64> {
        match self.count {
            0 => None,
            1 | 2 => Some(self.sum / self.count as f64),
            n => Some((self.sum - self.first) / (n - 1) as f64),
        }
    }
}

/// Epoch boundaries seen in a run's output.
#[derive(Debug, Default, Clone)]
pub struct Epochs {
    current: Option<(u64, f64)>,
    /// The run states its epoch times itself (`epoch_time=`).
    stated: bool,
    /// Finished epochs: (epoch number, seconds).
    pub done: Vec<(u64, f64)>,
}

impl Epochs {
    /// Epoch `n` seen at `t` seconds: a new number ends the previous epoch.
    pub fn see(&mut self, n: u64, t: f64) {
        if self.stated {
            return;
        }
        match self.current {
            Some((cur, _)) if cur == n => {}
            Some((cur, t0)) => {
                self.done.push((cur, t - t0));
                self.current = Some((n, t));
            }
            None => self.current = Some((n, t)),
        }
    }

    /// Epoch `n` ended and took `secs`, as the run's output says. From then on the run's
    /// own figures are used and epoch numbers alone mark nothing.
    pub fn reported(&mut self, n: u64, secs: f64) {
        self.stated = true;
        self.current = None;
        if !self.done.iter().any(|&(k, _)| k == n) {
            self.done.push((n, secs));
        }
    }

    /// The run ended at `t`: a run that succeeded finished its last epoch.
    pub fn finish(&mut self, t: f64, succeeded: bool) {
        if let Some((cur, t0)) = self.current.take() {
            if succeeded {
                self.done.push((cur, t - t0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(line: &str) -> Option<(f64, &'static str)> {
        scan(line, None).throughput
    }

    #[test]
    fn builtin_patterns() {
        assert_eq!(tp("step 10 img/s=1234.5 loss=0.3"), Some((1234.5, "img/s")));
        assert_eq!(tp("images/sec: 99"), Some((99.0, "img/s")));
        assert_eq!(
            tp("Train: 1 [ 100/1251 (  8%)]  Loss: 6.9 (6.9)  Time: 0.2s, 1320.12/s  (0.2s, 1200.00/s)  LR: 1e-3  Data: 0.01 (0.01)  Rate: 1320.12/s (1200.00/s)"),
            Some((1320.12, "img/s"))
        );
        assert_eq!(tp("throughput 55.5 samples/s"), Some((55.5, "samples/s")));
        assert_eq!(
            tp("{'train_samples_per_second': 12.3, 'epoch': 1.0}"),
            Some((12.3, "samples/s"))
        );
        assert_eq!(
            tp(" 45%|████▌     | 450/1000 [00:10<00:12, 44.50it/s, loss=0.1]"),
            Some((44.5, "it/s"))
        );
        assert_eq!(
            tp("  3%|▎   | 3/100 [00:06<03:14, 2.00s/it]"),
            Some((0.5, "it/s"))
        );
        assert_eq!(tp("loss 0.25 at step 100"), None);
        assert_eq!(tp("lr=1e-3/s nonsense"), None);
    }

    #[test]
    fn custom_metric() {
        let re = Regex::new(r"tput (?P<value>[0-9.]+)").unwrap();
        assert_eq!(
            scan("tput 7.5", Some(&re)).throughput,
            Some((7.5, CUSTOM_UNIT))
        );
        // the manifest's regex replaces the built-ins
        assert_eq!(scan("img/s=3", Some(&re)).throughput, None);
        let re1 = Regex::new(r"speed ([0-9]+)").unwrap();
        assert_eq!(
            scan("speed 12", Some(&re1)).throughput,
            Some((12.0, CUSTOM_UNIT))
        );
    }

    #[test]
    fn work_is_integrated_from_the_samples() {
        let mut s = Series::default();
        s.push(1.0, 100.0, "img/s");
        s.push(2.0, 100.0, "img/s");
        s.push(4.0, 50.0, "img/s");
        assert_eq!(s.work, 100.0 * 1.0 + 50.0 * 2.0);
    }

    #[test]
    fn stated_epoch_times_win() {
        let f = scan("epoch=1 epoch_time=4.25 epoch_img_per_s=11764.7", None);
        assert_eq!((f.epoch, f.epoch_time), (Some(1), Some(4.25)));
        assert_eq!(scan("Epoch 3/10", None).epoch_time, None);
        let mut e = Epochs::default();
        e.see(1, 0.5);
        e.reported(1, 4.25);
        e.see(2, 9.0);
        e.reported(2, 4.5);
        e.finish(12.0, true);
        assert_eq!(e.done, vec![(1, 4.25), (2, 4.5)]);
    }

    #[test]
    fn epochs_and_oom() {
        assert_eq!(scan("Epoch 3/10", None).epoch, Some(3));
        assert_eq!(scan("epoch: 4 loss 1", None).epoch, Some(4));
        assert_eq!(scan("Epoch [5/90]", None).epoch, Some(5));
        assert_eq!(scan("epochs = 10", None).epoch, None);
        assert_eq!(scan("Train: 2 [ 100/1251 ( 8%)]", None).epoch, Some(2));
        assert!(
            scan(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                None
            )
            .oom
        );
        assert!(scan("RuntimeError: CUDA error: out of memory", None).oom);
        assert!(!scan("memory 12 GiB free", None).oom);
        let mut e = Epochs::default();
        e.see(1, 0.0);
        e.see(1, 5.0);
        e.see(2, 10.0);
        e.finish(25.0, true);
        assert_eq!(e.done, vec![(1, 10.0), (2, 15.0)]);
    }

    #[test]
    fn series_mean_and_decimation() {
        let mut s = Series::default();
        assert_eq!(s.mean(), None);
        s.push(0.0, 10.0, "img/s");
        s.push(1.0, 100.0, "img/s");
        s.push(2.0, 200.0, "img/s");
        s.push(3.0, 5.0, "it/s");
        assert_eq!(s.mean(), Some(150.0));
        assert_eq!(s.count, 3);
        let mut s = Series::default();
        for i in 0..20_000 {
            s.push(i as f64, 1.0, "img/s");
        }
        assert!(s.samples.len() < MAX_KEPT);
        assert_eq!(s.count, 20_000);
        assert_eq!(s.mean(), Some(1.0));
    }
}
