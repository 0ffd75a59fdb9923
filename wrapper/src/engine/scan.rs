//! What a run's output says, one line at a time: throughput samples (a user's regex, or
//! the built-in patterns of common trainers), the user's own metrics (loss, accuracy),
//! epoch numbers and times, CUDA out-of-memory errors. Pure functions and small
//! accumulators, shared by `colloc run` and `colloc bench`.
//!
//! What colloc reads (also in colloc(1)):
//! - Throughput: with a `metric` regex, its group named `value` (else its first group) on
//!   any line; its unit is the manifest's `unit`, else the word next to the group in the
//!   regex (`img/s=(?P<value>…)` → `img/s`). Without one, the built-in patterns below.
//! - Epochs: `epoch_time=SECONDS` (or `epoch_time: S`) anywhere on a line is one finished
//!   epoch of that length (numbered by an epoch number on the same line, else counted).
//!   Without such lines, a line naming an epoch (`Epoch 3`, `epoch: 3`, `Epoch [3/10]`,
//!   timm's `Train: 3 [`) starts that epoch, and the time from the first line of epoch N to
//!   the first line of a later epoch is epoch N's time. The last epoch is not timed from
//!   the process's exit (that would count its shutdown), so it has no time.
//! - Out of memory: PyTorch's, CUDA's and cuBLAS's messages.
//! - Progress through the whole run (for the estimate of when it ends): `progress=F`
//!   (a fraction, or `P%`), `Epoch N/M` (epoch N of M has begun: N−1 done), `step N/M`,
//!   `iter N/M`, `iteration N/M` (N done), or tqdm's `P%|`. The first of these forms an
//!   attempt prints is the one followed; a count that goes back (a bar per epoch) is not
//!   whole-run progress, and the attempt's progress is then ignored ([`Advance`]).

use std::sync::OnceLock;

use regex::Regex;

mod progress;

use progress::progress_of_line;
pub use progress::{Advance, ProgressFact, ProgressForm};

const NUM: &str = r"([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)";

/// The unit shown when a regex names none and no `unit` is given.
pub const FALLBACK_UNIT: &str = "units/s";

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
            // tokens
            mk(
                format!(r"(?i)\b(?:tok|tokens)/s(?:ec)?\s*[=:]\s*{NUM}"),
                "tok/s",
                false,
            ),
            mk(
                format!(r"(?i)\b{NUM}\s*(?:tok|tokens)/s(?:ec)?\b"),
                "tok/s",
                false,
            ),
            // tqdm: `12.34it/s`, or `1.50s/it` for slow loops
            mk(format!(r"\b{NUM}\s?it/s\b"), "it/s", false),
            mk(format!(r"\b{NUM}\s?s/it\b"), "it/s", true),
        ]
    })
}

/// A description of the built-in patterns, for messages.
pub const BUILTIN_DESCRIPTION: &str =
    "img/s=N, N img/s, timm's Rate: N/s, samples/s, samples_per_second, tok/s, tqdm's N it/s";

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
    R.get_or_init(|| {
        Regex::new(r"\bepoch_time\s*[=:]\s*([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)")
            .unwrap_or_else(|e| panic!("{e}"))
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

/// A user's regex for one number on a line: its `value` group, else its first group.
#[derive(Debug, Clone)]
pub struct Pattern {
    re: Regex,
    group: usize,
}

impl Pattern {
    /// Compile a pattern.
    ///
    /// # Errors
    /// A one-line message: an invalid regex, or one without a capture group.
    pub fn new(pattern: &str) -> Result<Pattern, String> {
        let re = Regex::new(pattern).map_err(|e| {
            let why = e.to_string();
            let why = why.lines().last().unwrap_or("invalid").trim().to_string();
            format!("bad regex {pattern:?}: {why}")
        })?;
        let group = match re.capture_names().position(|n| n == Some("value")) {
            Some(i) => i,
            None if re.captures_len() > 1 => 1,
            None => {
                return Err(format!(
                    "regex {pattern:?} has no capture group; mark the number with (?P<value>...)"
                ))
            }
        };
        Ok(Pattern { re, group })
    }

    /// The regex as written.
    pub fn as_str(&self) -> &str {
        self.re.as_str()
    }

    /// The number on a line, if the line carries one (finite).
    pub fn find(&self, line: &str) -> Option<f64> {
        let caps = self.re.captures(line)?;
        let v: f64 = caps.get(self.group)?.as_str().trim().parse().ok()?;
        v.is_finite().then_some(v)
    }
}

/// Where throughput samples come from.
#[derive(Debug, Clone)]
pub enum Throughput {
    /// The built-in patterns, each with its own unit.
    Builtin,
    /// A user's regex and its unit.
    Custom {
        /// The regex.
        pattern: Pattern,
        /// Its unit.
        unit: String,
    },
}

impl Throughput {
    /// A user's regex; the unit as given, else read from the regex.
    ///
    /// # Errors
    /// As [`Pattern::new`].
    pub fn custom(regex: &str, unit: Option<&str>) -> Result<Throughput, String> {
        let pattern = Pattern::new(regex)?;
        let unit = match unit.map(str::trim).filter(|u| !u.is_empty()) {
            Some(u) => u.to_string(),
            None => unit_of_regex(regex),
        };
        Ok(Throughput::Custom { pattern, unit })
    }

    /// How to describe it in messages.
    pub fn describe(&self) -> String {
        match self {
            Throughput::Builtin => format!("the built-in patterns ({BUILTIN_DESCRIPTION})"),
            Throughput::Custom { pattern, .. } => {
                format!("the metric regex {:?}", pattern.as_str())
            }
        }
    }

    /// True for a user's regex.
    pub fn is_custom(&self) -> bool {
        matches!(self, Throughput::Custom { .. })
    }
}

/// Read the unit from a throughput regex: the word just before the number's group, or just
/// after it, preferring one that looks like a rate (`img/s`, `tok/s`).
pub fn unit_of_regex(regex: &str) -> String {
    let Some((start, end)) = value_group_span(regex) else {
        return FALLBACK_UNIT.into();
    };
    let before = literal_text(&regex[..start]);
    let after = literal_text(&regex[end..]);
    let last_word = |s: &str| -> Option<String> {
        s.split_whitespace()
            .next_back()
            .map(clean_word)
            .filter(|w| is_unit_word(w))
    };
    let first_word = |s: &str| -> Option<String> {
        s.split_whitespace()
            .next()
            .map(clean_word)
            .filter(|w| is_unit_word(w))
    };
    let candidates = [last_word(&before), first_word(&after)];
    candidates
        .iter()
        .flatten()
        .find(|w| w.contains('/'))
        .or_else(|| candidates.iter().flatten().next())
        .cloned()
        .unwrap_or_else(|| FALLBACK_UNIT.into())
}

/// Byte span of the number's group in a regex: `(?P<value>…)`/`(?<value>…)`, else the
/// first capturing group.
fn value_group_span(re: &str) -> Option<(usize, usize)> {
    let b = re.as_bytes();
    // (start, capturing group number or 0, is the `value` group)
    let mut opens: Vec<(usize, usize, bool)> = Vec::new();
    let mut groups = 0;
    let mut first: Option<(usize, usize)> = None;
    let mut named: Option<(usize, usize)> = None;
    let mut in_class = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' if !in_class => in_class = true,
            b']' if in_class => in_class = false,
            b'(' if !in_class => {
                let rest = &re[i..];
                let is_value = rest.starts_with("(?P<value>") || rest.starts_with("(?<value>");
                let capturing =
                    !rest.starts_with("(?") || rest.starts_with("(?P<") || rest.starts_with("(?<");
                let n = if capturing {
                    groups += 1;
                    groups
                } else {
                    0
                };
                opens.push((i, n, is_value));
            }
            b')' if !in_class => {
                if let Some((s, n, is_value)) = opens.pop() {
                    if is_value && named.is_none() {
                        named = Some((s, i + 1));
                    }
                    if n == 1 {
                        first = Some((s, i + 1));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    named.or(first)
}

/// The literal characters of a regex fragment: escapes resolved, classes and operators
/// turned into spaces.
fn literal_text(frag: &str) -> String {
    let mut out = String::new();
    let mut chars = frag.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        if in_class {
            if c == ']' {
                in_class = false;
            }
            continue;
        }
        match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_alphanumeric() => out.push(' '), // \s \d \b \w
                Some(e) => out.push(e),
                None => {}
            },
            '[' => {
                in_class = true;
                out.push(' ');
            }
            '(' | ')' | '|' | '^' | '$' | '*' | '+' | '?' | '{' | '}' => out.push(' '),
            '.' => out.push('.'),
            c => out.push(c),
        }
    }
    out
}

fn clean_word(w: &str) -> String {
    w.trim_matches(|c: char| matches!(c, '=' | ':' | ',' | ';' | '\'' | '"' | '.' | '-'))
        .to_string()
}

fn is_unit_word(w: &str) -> bool {
    let mut cs = w.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '%')
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_%.-".contains(c))
        && w.len() <= 24
}

pub use colloc_results::record::Best;

/// A user metric: a name, its pattern, which value is best.
#[derive(Debug, Clone)]
pub struct UserMetric {
    /// Name (a column name: letters, digits, `_`).
    pub name: String,
    /// Its pattern.
    pub pattern: Pattern,
    /// Min or max is best.
    pub best: Best,
}

/// Everything one run's lines are scanned for.
#[derive(Debug, Clone)]
pub struct Scanner {
    /// Throughput.
    pub throughput: Throughput,
    /// The user's metrics.
    pub metrics: Vec<UserMetric>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            throughput: Throughput::Builtin,
            metrics: Vec::new(),
        }
    }
}

/// What one output line says.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LineFacts<'a> {
    /// A throughput sample and its unit.
    pub throughput: Option<(f64, &'a str)>,
    /// An epoch number.
    pub epoch: Option<u64>,
    /// An epoch's duration in seconds (`epoch_time=`).
    pub epoch_time: Option<f64>,
    /// A CUDA out-of-memory message.
    pub oom: bool,
    /// User metrics found: (index into the scanner's metrics, value).
    pub metrics: Vec<(usize, f64)>,
    /// Progress through the whole run.
    pub progress: Option<ProgressFact>,
}

impl Scanner {
    /// Read one line.
    pub fn scan(&self, line: &str) -> LineFacts<'_> {
        let mut f = LineFacts::default();
        // Cheap pre-checks keep the common line (no digits, no keywords) off the regexes.
        if !line.bytes().any(|b| b.is_ascii_digit()) {
            f.oom = line.contains("emory") && oom_re().is_match(line);
            return f;
        }
        f.progress = progress_of_line(line);
        f.throughput = match &self.throughput {
            Throughput::Custom { pattern, unit } => pattern.find(line).map(|v| (v, unit.as_str())),
            Throughput::Builtin => builtin_throughput(line),
        };
        for (i, m) in self.metrics.iter().enumerate() {
            if let Some(v) = m.pattern.find(line) {
                f.metrics.push((i, v));
            }
        }
        if line.contains("poch") || line.contains("Train: ") {
            for re in epoch_res() {
                if let Some(n) = re.captures(line).and_then(|c| c[1].parse().ok()) {
                    f.epoch = Some(n);
                    break;
                }
            }
            if line.contains("epoch_time") {
                f.epoch_time = epoch_time_re()
                    .captures(line)
                    .and_then(|c| c[1].parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s >= 0.0);
            }
        }
        f.oom = (line.contains("emory") || line.contains("ALLOC") || line.contains("OutOfMemory"))
            && oom_re().is_match(line);
        f
    }
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

/// Epochs seen in a run's output (see the module docs for the rule).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Epochs {
    current: Option<(u64, f64)>,
    stated: bool,
    /// Finished epochs: (epoch number, seconds), in the order they finished.
    pub done: Vec<(u64, f64)>,
    /// How many of `done` were handed out by [`Epochs::take_fresh`].
    taken: usize,
}

impl Epochs {
    /// Fold one line's facts seen at `t` seconds.
    pub fn see(&mut self, epoch: Option<u64>, epoch_time: Option<f64>, t: f64) {
        if let Some(secs) = epoch_time {
            self.stated = true;
            self.current = None;
            let n = epoch.unwrap_or_else(|| self.done.last().map_or(1, |&(k, _)| k + 1));
            if !self.done.iter().any(|&(k, _)| k == n) {
                self.done.push((n, secs));
            }
            return;
        }
        let Some(n) = epoch else { return };
        if self.stated {
            return;
        }
        match self.current {
            Some((cur, _)) if cur == n => {}
            Some((cur, t0)) => {
                if !self.done.iter().any(|&(k, _)| k == cur) {
                    self.done.push((cur, t - t0));
                }
                self.current = Some((n, t));
            }
            None => self.current = Some((n, t)),
        }
    }

    /// Epochs finished since the last call.
    pub fn take_fresh(&mut self) -> Vec<(u64, f64)> {
        let fresh = self.done[self.taken..].to_vec();
        self.taken = self.done.len();
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(line: &str) -> Option<(f64, String)> {
        Scanner::default()
            .scan(line)
            .throughput
            .map(|(v, u)| (v, u.to_string()))
    }

    #[test]
    fn builtin_patterns() {
        let s = |v: f64, u: &str| Some((v, u.to_string()));
        assert_eq!(tp("step 10 img/s=1234.5 loss=0.3"), s(1234.5, "img/s"));
        assert_eq!(tp("images/sec: 99"), s(99.0, "img/s"));
        assert_eq!(
            tp("Train: 1 [ 100/1251 (  8%)]  Loss: 6.9 (6.9)  Time: 0.2s, 1320.12/s  (0.2s, 1200.00/s)  LR: 1e-3  Data: 0.01 (0.01)  Rate: 1320.12/s (1200.00/s)"),
            s(1320.12, "img/s")
        );
        assert_eq!(tp("throughput 55.5 samples/s"), s(55.5, "samples/s"));
        assert_eq!(
            tp("{'train_samples_per_second': 12.3, 'epoch': 1.0}"),
            s(12.3, "samples/s")
        );
        assert_eq!(
            tp(" 45%|████▌     | 450/1000 [00:10<00:12, 44.50it/s, loss=0.1]"),
            s(44.5, "it/s")
        );
        assert_eq!(tp("100.0it/s"), s(100.0, "it/s"));
        assert_eq!(
            tp("  3%|▎   | 3/100 [00:06<03:14, 2.00s/it]"),
            s(0.5, "it/s")
        );
        assert_eq!(tp("tokens/s=812.5"), s(812.5, "tok/s"));
        assert_eq!(tp("loss 0.25 at step 100"), None);
        assert_eq!(tp("lr=1e-3/s nonsense"), None);
    }

    #[test]
    fn units_come_from_the_regex() {
        assert_eq!(unit_of_regex(r"img/s=(?P<value>[0-9.]+)"), "img/s");
        assert_eq!(
            unit_of_regex(r"samples/sec:\s*(?P<value>[0-9.]+)"),
            "samples/sec"
        );
        assert_eq!(unit_of_regex(r"(?P<value>[0-9.]+)\s*tok/s"), "tok/s");
        assert_eq!(unit_of_regex(r"\btput (?P<value>[0-9.]+)"), "tput");
        assert_eq!(unit_of_regex(r"speed ([0-9]+)"), "speed");
        assert_eq!(unit_of_regex(r"(?i)rate\s*=\s*([0-9.]+) img/s"), "img/s");
        assert_eq!(unit_of_regex(r"([0-9.]+)"), FALLBACK_UNIT);
        assert_eq!(unit_of_regex(r"imgs\/s=(?P<value>[0-9.]+)"), "imgs/s");
        let t = Throughput::custom(r"img/s=(?P<value>[0-9.]+)", None).unwrap();
        let s = Scanner {
            throughput: t,
            metrics: vec![],
        };
        assert_eq!(s.scan("x img/s=7.5").throughput, Some((7.5, "img/s")));
        let t = Throughput::custom(r"tput (?P<value>[0-9.]+)", Some("seq/s")).unwrap();
        let s = Scanner {
            throughput: t,
            metrics: vec![],
        };
        assert_eq!(s.scan("tput 3").throughput, Some((3.0, "seq/s")));
        // the user's regex replaces the built-ins
        assert_eq!(s.scan("img/s=3").throughput, None);
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        let e = Pattern::new("img/s=").unwrap_err();
        assert!(e.contains("no capture group"), "{e}");
        let e = Pattern::new("(").unwrap_err();
        assert!(e.starts_with("bad regex"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn user_metrics_keep_last_and_best_by_name() {
        assert_eq!(Best::for_name("loss"), Best::Min);
        assert_eq!(Best::for_name("val_error"), Best::Min);
        assert_eq!(Best::for_name("acc"), Best::Max);
        let s = Scanner {
            throughput: Throughput::Builtin,
            metrics: vec![
                UserMetric {
                    name: "loss".into(),
                    pattern: Pattern::new(r"loss=(?P<value>[0-9.]+)").unwrap(),
                    best: Best::Min,
                },
                UserMetric {
                    name: "acc".into(),
                    pattern: Pattern::new(r"acc=([0-9.]+)").unwrap(),
                    best: Best::Max,
                },
            ],
        };
        let f = s.scan("step 3 loss=0.25 acc=0.9 img/s=10");
        assert_eq!(f.metrics, vec![(0, 0.25), (1, 0.9)]);
        assert_eq!(f.throughput, Some((10.0, "img/s")));
    }

    #[test]
    fn epoch_times_anywhere_and_never_to_exit() {
        let sc = Scanner::default();
        // bench/train.py's line
        let f = sc.scan("epoch=1 epoch_time=4.25 epoch_img_per_s=11764.7");
        assert_eq!((f.epoch, f.epoch_time), (Some(1), Some(4.25)));
        // on its own line, no epoch number
        let f = sc.scan("epoch_time=1.5");
        assert_eq!((f.epoch, f.epoch_time), (None, Some(1.5)));
        let mut e = Epochs::default();
        e.see(f.epoch, f.epoch_time, 3.0);
        e.see(None, Some(2.5), 6.0);
        assert_eq!(e.done, vec![(1, 1.5), (2, 2.5)]);
        // numbered lines: from one epoch's first line to the next's; the last is open
        let mut e = Epochs::default();
        for (n, t) in [(1, 0.0), (1, 5.0), (2, 10.0), (3, 25.0)] {
            e.see(Some(n), None, t);
        }
        assert_eq!(e.done, vec![(1, 10.0), (2, 15.0)]);
        assert_eq!(e.take_fresh(), vec![(1, 10.0), (2, 15.0)]);
        assert_eq!(e.take_fresh(), vec![]);
        // once times are stated, numbers alone mark nothing
        let mut e = Epochs::default();
        e.see(Some(1), None, 0.5);
        e.see(Some(1), Some(4.25), 5.0);
        e.see(Some(2), None, 9.0);
        e.see(Some(2), Some(4.5), 9.5);
        assert_eq!(e.done, vec![(1, 4.25), (2, 4.5)]);
    }

    #[test]
    fn epochs_and_oom() {
        let sc = Scanner::default();
        assert_eq!(sc.scan("Epoch 3/10").epoch, Some(3));
        assert_eq!(sc.scan("epoch: 4 loss 1").epoch, Some(4));
        assert_eq!(sc.scan("Epoch [5/90]").epoch, Some(5));
        assert_eq!(sc.scan("epochs = 10").epoch, None);
        assert_eq!(sc.scan("Train: 2 [ 100/1251 ( 8%)]").epoch, Some(2));
        assert!(
            sc.scan("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
                .oom
        );
        assert!(sc.scan("RuntimeError: CUDA error: out of memory").oom);
        assert!(!sc.scan("memory 12 GiB free").oom);
    }
}
