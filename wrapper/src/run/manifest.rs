//! The run manifest (`runs.toml`): `[defaults]`, `[[run]]` and `[[sweep]]` tables, read
//! into `deny_unknown_fields` structs and checked whole before anything starts.
//!
//! Every error names the file and line and says what is wrong. Placeholders `{key}` in a
//! sweep's name, command, env values and workdir are its grid keys; `{{` and `}}` are
//! literal braces there. A manifest is read through a bounded reader: at most
//! [`MAX_MANIFEST_BYTES`].

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::retry::{self, RetryOn, Rule};
use crate::engine::scan::{Best, Pattern, Scanner, Throughput, UserMetric};
use colloc_results::duration;
use colloc_results::record::pairs::Pairs;
use template::{check_template, combinations, fill};

/// Largest manifest colloc reads (16 MiB): a sweep of 100,000 runs fits many times over;
/// `/dev/zero` or a wrong file does not.
pub const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;

/// One run to start, fully resolved.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Unique name; also the log file's name and the live-view prefix.
    pub name: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Extra environment, applied after colloc's own variables.
    pub env: Vec<(String, String)>,
    /// Working directory (`None`: colloc's own).
    pub workdir: Option<PathBuf>,
    /// What its output is scanned for: throughput (its `metric` regex and `unit`, else
    /// the built-in patterns) and its `metrics`.
    pub scanner: Arc<Scanner>,
    /// Per-run time limit.
    pub timeout: Option<Duration>,
    /// The grid values of its sweep point (`None` for a `[[run]]`).
    pub grid: Option<Pairs>,
    /// GPU memory it declared it needs (`gpu_memory`), bytes: it goes only onto a slot
    /// that holds it.
    pub gpu_memory: Option<u64>,
    /// The manifest line of its command (`None`: not from a manifest).
    pub line: Option<usize>,
    /// Its `retries` and `retry_on` (its own, its sweep's or `[defaults]`); the flags
    /// where none is set.
    pub retry: Rule,
}

impl RunSpec {
    /// Let go of what only a start of the run needs (its command, environment, working
    /// directory and grid values), once it will not start again: its record holds them.
    pub fn let_go(&mut self) {
        self.command = Vec::new();
        self.env = Vec::new();
        self.workdir = None;
        self.grid = None;
    }

    /// A run of `command` with the built-in throughput patterns and nothing else.
    pub fn plain(name: String, command: Vec<String>) -> RunSpec {
        RunSpec {
            name,
            command,
            env: Vec::new(),
            workdir: None,
            scanner: Arc::new(Scanner::default()),
            timeout: None,
            grid: None,
            gpu_memory: None,
            line: None,
            retry: Rule::default(),
        }
    }
}

/// A manifest error: file, line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The manifest's path as given.
    pub path: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.path, l, self.msg),
            None => write!(f, "{}: {}", self.path, self.msg),
        }
    }
}

impl std::error::Error for ManifestError {}

/// A TOML scalar given where colloc wants text (grid values, env values).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Text(s) => s.clone(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// A command: an argument list, or one string run through `sh -c`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Argv(Vec<String>),
    Shell(String),
}

impl RawCommand {
    fn argv(&self) -> Vec<String> {
        match self {
            RawCommand::Argv(v) => v.clone(),
            RawCommand::Shell(s) if s.trim().is_empty() => Vec::new(),
            RawCommand::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
        }
    }
}

type Env = BTreeMap<String, Spanned<Scalar>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    defaults: Option<RawDefaults>,
    #[serde(default)]
    run: Vec<RawRun>,
    #[serde(default)]
    sweep: Vec<RawSweep>,
}

/// A user metric: a regex, or a table with the regex and which value is best.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawMetric {
    Regex(String),
    Table(RawMetricTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetricTable {
    regex: String,
    best: Option<String>,
}

type Metrics = Spanned<BTreeMap<String, Spanned<RawMetric>>>;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    workdir: Option<Spanned<String>>,
    metric: Option<Spanned<String>>,
    unit: Option<Spanned<String>>,
    metrics: Option<Metrics>,
    env: Option<Env>,
    timeout: Option<Spanned<String>>,
    gpu_memory: Option<Spanned<String>>,
    retries: Option<Spanned<Scalar>>,
    retry_on: Option<Spanned<Scalar>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    name: Option<Spanned<String>>,
    command: Spanned<RawCommand>,
    env: Option<Env>,
    workdir: Option<Spanned<String>>,
    metric: Option<Spanned<String>>,
    unit: Option<Spanned<String>>,
    metrics: Option<Metrics>,
    timeout: Option<Spanned<String>>,
    gpu_memory: Option<Spanned<String>>,
    retries: Option<Spanned<Scalar>>,
    retry_on: Option<Spanned<Scalar>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    name: Option<Spanned<String>>,
    command: Spanned<RawCommand>,
    grid: Spanned<BTreeMap<String, Spanned<Vec<Scalar>>>>,
    env: Option<Env>,
    workdir: Option<Spanned<String>>,
    metric: Option<Spanned<String>>,
    unit: Option<Spanned<String>>,
    metrics: Option<Metrics>,
    timeout: Option<Spanned<String>>,
    gpu_memory: Option<Spanned<String>>,
    retries: Option<Spanned<Scalar>>,
    retry_on: Option<Spanned<Scalar>>,
}

/// Most runs one manifest may expand to (a typo in a grid should not start a million):
/// the record's own limit, which it keeps (the record is the lower layer).
pub use colloc_results::record::store::MAX_RUNS;

struct Ctx<'a> {
    path: String,
    text: &'a str,
    base: PathBuf,
}

impl Ctx<'_> {
    fn err(&self, span: Option<Range<usize>>, msg: impl Into<String>) -> ManifestError {
        ManifestError {
            path: self.path.clone(),
            line: span.map(|s| line_of(self.text, s.start)),
            msg: msg.into(),
        }
    }

    /// The throughput pattern of a table: its own `metric`/`unit`, else the defaults'.
    fn throughput(
        &self,
        metric: Option<&Spanned<String>>,
        unit: Option<&Spanned<String>>,
        d: &RawDefaults,
    ) -> Result<Throughput, ManifestError> {
        let metric = metric.or(d.metric.as_ref());
        let unit = unit.or(d.unit.as_ref());
        match (metric, unit) {
            (Some(m), u) => Throughput::custom(m.get_ref(), u.map(|u| u.get_ref().as_str()))
                .map_err(|e| self.err(Some(m.span()), format!("metric: {e}"))),
            (None, Some(u)) => Err(self.err(
                Some(u.span()),
                "unit without a metric regex: the built-in patterns name their own units",
            )),
            (None, None) => Ok(Throughput::Builtin),
        }
    }

    /// The user metrics of a table over the defaults' (a table's own win by name).
    fn metrics(
        &self,
        own: Option<&Metrics>,
        d: &RawDefaults,
    ) -> Result<Vec<UserMetric>, ManifestError> {
        let mut out: Vec<UserMetric> = Vec::new();
        for table in [d.metrics.as_ref(), own].into_iter().flatten() {
            for (name, m) in table.get_ref() {
                let ok = !name.is_empty()
                    && name.len() <= 40
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ok {
                    return Err(self.err(
                        Some(table.span()),
                        format!(
                            "metric name {name:?} is not valid: use 1-40 letters, digits and _"
                        ),
                    ));
                }
                let (regex, best) = match m.get_ref() {
                    RawMetric::Regex(r) => (r.as_str(), None),
                    RawMetric::Table(t) => (t.regex.as_str(), t.best.as_deref()),
                };
                let pattern = Pattern::new(regex)
                    .map_err(|e| self.err(Some(m.span()), format!("metrics.{name}: {e}")))?;
                let best = match best {
                    None => Best::for_name(name),
                    Some("min") => Best::Min,
                    Some("max") => Best::Max,
                    Some(other) => {
                        return Err(self.err(
                            Some(m.span()),
                            format!("metrics.{name}: best = {other:?}; valid: \"min\" or \"max\""),
                        ))
                    }
                };
                out.retain(|u| u.name != *name);
                out.push(UserMetric {
                    name: name.clone(),
                    pattern,
                    best,
                });
            }
        }
        Ok(out)
    }

    /// A table's `retries` and `retry_on`, checked (unset: `None`).
    fn retry(
        &self,
        retries: Option<&Spanned<Scalar>>,
        on: Option<&Spanned<Scalar>>,
    ) -> Result<Rule, ManifestError> {
        let retries = retries
            .map(|r| {
                match r.get_ref() {
                    Scalar::Int(n) => retry::retries(*n),
                    Scalar::Text(t) => Err(retry::bad_retries(format!("{t:?}"))),
                    other => Err(retry::bad_retries(other.text())),
                }
                .map_err(|m| self.err(Some(r.span()), m))
            })
            .transpose()?;
        let on = on
            .map(|o| {
                match o.get_ref() {
                    Scalar::Text(t) => RetryOn::parse(t).map_err(|e| format!("retry_on: {e}")),
                    other => Err(retry::bad_retry_on(other.text())),
                }
                .map_err(|m| self.err(Some(o.span()), m))
            })
            .transpose()?;
        Ok(Rule { retries, on })
    }

    fn gpu_memory(&self, s: &Spanned<String>) -> Result<u64, ManifestError> {
        super::memsize::parse(s.get_ref()).map_err(|e| self.err(Some(s.span()), e))
    }

    fn timeout(&self, s: &Spanned<String>) -> Result<Duration, ManifestError> {
        duration::parse(s.get_ref(), false).map_err(|e| self.err(Some(s.span()), e))
    }

    fn workdir(&self, dir: &str, span: Range<usize>) -> Result<PathBuf, ManifestError> {
        let p = self.base.join(dir);
        if !p.is_dir() {
            return Err(self.err(
                Some(span),
                format!("workdir {:?} is not a directory ({})", dir, p.display()),
            ));
        }
        Ok(p)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Check a run name: it names a log file and a live-view prefix.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-+=,@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "run name {:?} is not valid: use 1-100 of letters, digits and . _ - + = , @ (not starting with .)",
            name
        ))
    }
}

/// Parse a manifest file.
pub fn load(path: &Path) -> Result<Vec<RunSpec>, ManifestError> {
    let shown = path.display().to_string();
    let err = |msg: String| ManifestError {
        path: shown.clone(),
        line: None,
        msg,
    };
    // Non-blocking, a regular file, capped: a FIFO or /dev/zero is refused at once.
    let bytes =
        colloc_results::userfs::read_user_file(path, MAX_MANIFEST_BYTES).map_err(|e| match e {
            colloc_results::userfs::UserFsError::TooLarge { .. } => err(format!(
                "the run manifest is larger than {} MiB; a manifest is at most that big",
                MAX_MANIFEST_BYTES / (1024 * 1024)
            )),
            e => err(format!("cannot read the run manifest: {}", e.reason())),
        })?;
    let text =
        String::from_utf8(bytes).map_err(|_| err("the run manifest is not UTF-8 text".into()))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    parse(&text, &shown, &base)
}

/// Parse manifest text; `base` resolves relative workdirs.
pub fn parse(text: &str, path: &str, base: &Path) -> Result<Vec<RunSpec>, ManifestError> {
    let cx = Ctx {
        path: path.to_string(),
        text,
        base: base.to_path_buf(),
    };
    let raw: RawManifest = toml::from_str(text).map_err(|e| {
        let msg = e.message().trim().replace('\n', "; ");
        cx.err(e.span(), msg)
    })?;
    let d = Defaults::of(&cx, raw.defaults.unwrap_or_default())?;
    let mut runs: Vec<(RunSpec, Range<usize>)> = Vec::new();
    for (i, r) in raw.run.iter().enumerate() {
        runs.push(run_table(&cx, &d, i, r)?);
    }
    for s in &raw.sweep {
        let expanded = sweep_table(&cx, &d, s, runs.len())?;
        runs.extend(expanded);
    }
    if runs.is_empty() {
        return Err(cx.err(None, "no runs: add a [[run]] or [[sweep]] table"));
    }
    let mut seen = HashSet::new();
    for (r, span) in &runs {
        if !seen.insert(r.name.as_str()) {
            return Err(cx.err(
                Some(span.clone()),
                format!("duplicate run name {:?}: run names must be unique", r.name),
            ));
        }
    }
    Ok(runs.into_iter().map(|(r, _)| r).collect())
}

/// The `[defaults]` table, checked: what a run or sweep that sets nothing of its own gets.
struct Defaults {
    raw: RawDefaults,
    scanner: Arc<Scanner>,
    timeout: Option<Duration>,
    memory: Option<u64>,
    workdir: Option<PathBuf>,
    env: Vec<(String, String)>,
    retry: Rule,
}

impl Defaults {
    fn of(cx: &Ctx<'_>, d: RawDefaults) -> Result<Defaults, ManifestError> {
        let scanner = Arc::new(Scanner {
            throughput: cx.throughput(None, None, &d)?,
            metrics: cx.metrics(None, &d)?,
        });
        let timeout = d.timeout.as_ref().map(|t| cx.timeout(t)).transpose()?;
        let memory = d
            .gpu_memory
            .as_ref()
            .map(|m| cx.gpu_memory(m))
            .transpose()?;
        let workdir = d
            .workdir
            .as_ref()
            .map(|w| cx.workdir(w.get_ref(), w.span()))
            .transpose()?;
        check_env(cx, &d.env)?;
        let env: Vec<(String, String)> = env_pairs(&d.env);
        let retry = cx.retry(d.retries.as_ref(), d.retry_on.as_ref())?;
        Ok(Defaults {
            retry,
            raw: d,
            scanner,
            timeout,
            memory,
            workdir,
            env,
        })
    }
}

/// The `i`-th `[[run]]` table, checked, with the span its errors point at.
fn run_table(
    cx: &Ctx<'_>,
    d: &Defaults,
    i: usize,
    r: &RawRun,
) -> Result<(RunSpec, Range<usize>), ManifestError> {
    let argv = r.command.get_ref().argv();
    check_command(cx, &argv, r.command.span())?;
    check_env(cx, &r.env)?;
    let (name, span) = match &r.name {
        Some(n) => (n.get_ref().clone(), n.span()),
        None => (format!("run{}", i + 1), r.command.span()),
    };
    check_name(&name).map_err(|m| cx.err(Some(span.clone()), m))?;
    let mut env = d.env.clone();
    env.extend(env_pairs(&r.env));
    Ok((
        RunSpec {
            name,
            command: argv,
            env,
            workdir: match &r.workdir {
                Some(w) => Some(cx.workdir(w.get_ref(), w.span())?),
                None => d.workdir.clone(),
            },
            scanner: scanner_for(
                cx,
                &d.raw,
                &d.scanner,
                r.metric.as_ref(),
                r.unit.as_ref(),
                r.metrics.as_ref(),
            )?,
            timeout: match &r.timeout {
                Some(t) => Some(cx.timeout(t)?),
                None => d.timeout,
            },
            grid: None,
            gpu_memory: match &r.gpu_memory {
                Some(m) => Some(cx.gpu_memory(m)?),
                None => d.memory,
            },
            line: Some(line_of(cx.text, r.command.span().start)),
            retry: cx
                .retry(r.retries.as_ref(), r.retry_on.as_ref())?
                .over(d.retry),
        },
        span,
    ))
}

/// A `[[sweep]]`'s grid, checked: valid keys, each with values, and no more runs in all
/// than a manifest may hold (`so_far` before it).
fn sweep_grid(
    cx: &Ctx<'_>,
    s: &RawSweep,
    so_far: usize,
) -> Result<BTreeMap<String, Vec<String>>, ManifestError> {
    let grid_span = s.grid.span();
    let mut grid: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, vals) in s.grid.get_ref() {
        if !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || k.is_empty() {
            return Err(cx.err(
                Some(grid_span.clone()),
                format!("grid key {k:?} is not valid: use letters, digits and _"),
            ));
        }
        if vals.get_ref().is_empty() {
            return Err(cx.err(Some(vals.span()), format!("grid key {k:?} has no values")));
        }
        grid.insert(k.clone(), vals.get_ref().iter().map(Scalar::text).collect());
    }
    if grid.is_empty() {
        return Err(cx.err(Some(grid_span), "sweep grid is empty"));
    }
    let combos = grid
        .values()
        .try_fold(1usize, |acc, v| acc.checked_mul(v.len()))
        .unwrap_or(usize::MAX);
    if combos > MAX_RUNS || so_far + combos > MAX_RUNS {
        return Err(cx.err(
            Some(grid_span),
            format!("sweep expands to {combos} runs; at most {MAX_RUNS} runs per manifest"),
        ));
    }
    Ok(grid)
}

/// A `[[sweep]]` table expanded into one run per combination of its grid, each template
/// checked first; `so_far`: the runs before it.
fn sweep_table(
    cx: &Ctx<'_>,
    d: &Defaults,
    s: &RawSweep,
    so_far: usize,
) -> Result<Vec<(RunSpec, Range<usize>)>, ManifestError> {
    let grid_span = s.grid.span();
    let grid = sweep_grid(cx, s, so_far)?;
    let tcheck =
        |t: &str, span: Range<usize>| check_template(t, &grid).map_err(|m| cx.err(Some(span), m));
    let name_t = match &s.name {
        Some(n) => {
            tcheck(n.get_ref(), n.span())?;
            n.get_ref().clone()
        }
        None => grid
            .keys()
            .map(|k| format!("{k}={{{k}}}"))
            .collect::<Vec<_>>()
            .join("-"),
    };
    let name_span = s.name.as_ref().map(|n| n.span()).unwrap_or(grid_span);
    let argv_t = s.command.get_ref().argv();
    check_command(cx, &argv_t, s.command.span())?;
    check_env(cx, &s.env)?;
    for a in &argv_t {
        tcheck(a, s.command.span())?;
    }
    let env_t = env_pairs(&s.env);
    if let Some(env) = &s.env {
        for v in env.values() {
            tcheck(&v.get_ref().text(), v.span())?;
        }
    }
    if let Some(w) = &s.workdir {
        tcheck(w.get_ref(), w.span())?;
    }
    let scanner = scanner_for(
        cx,
        &d.raw,
        &d.scanner,
        s.metric.as_ref(),
        s.unit.as_ref(),
        s.metrics.as_ref(),
    )?;
    let timeout = match &s.timeout {
        Some(t) => Some(cx.timeout(t)?),
        None => d.timeout,
    };
    if let Some(m) = &s.gpu_memory {
        tcheck(m.get_ref(), m.span())?;
    }
    let command_line = line_of(cx.text, s.command.span().start);
    let retry = cx
        .retry(s.retries.as_ref(), s.retry_on.as_ref())?
        .over(d.retry);
    let mut runs = Vec::new();
    for combo in combinations(&grid) {
        let name = fill(&name_t, &combo);
        check_name(&name).map_err(|m| cx.err(Some(name_span.clone()), m))?;
        let mut env = d.env.clone();
        env.extend(env_t.iter().map(|(k, v)| (k.clone(), fill(v, &combo))));
        let workdir = match &s.workdir {
            Some(w) => Some(cx.workdir(&fill(w.get_ref(), &combo), w.span())?),
            None => d.workdir.clone(),
        };
        runs.push((
            RunSpec {
                name,
                command: argv_t.iter().map(|a| fill(a, &combo)).collect(),
                env,
                workdir,
                scanner: Arc::clone(&scanner),
                timeout,
                gpu_memory: match &s.gpu_memory {
                    Some(m) => Some(
                        super::memsize::parse(&fill(m.get_ref(), &combo))
                            .map_err(|e| cx.err(Some(m.span()), e))?,
                    ),
                    None => d.memory,
                },
                grid: Some(
                    combo
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                line: Some(command_line),
                retry,
            },
            name_span.clone(),
        ));
    }
    Ok(runs)
}

/// The scanner of a table: the defaults' when it sets nothing of its own.
fn scanner_for(
    cx: &Ctx<'_>,
    d: &RawDefaults,
    d_scanner: &Arc<Scanner>,
    metric: Option<&Spanned<String>>,
    unit: Option<&Spanned<String>>,
    metrics: Option<&Metrics>,
) -> Result<Arc<Scanner>, ManifestError> {
    if metric.is_none() && unit.is_none() && metrics.is_none() {
        return Ok(Arc::clone(d_scanner));
    }
    Ok(Arc::new(Scanner {
        throughput: cx.throughput(metric, unit, d)?,
        metrics: cx.metrics(metrics, d)?,
    }))
}

fn check_command(cx: &Ctx<'_>, argv: &[String], span: Range<usize>) -> Result<(), ManifestError> {
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(cx.err(Some(span), "the command contains a NUL character"));
    }
    match argv.first() {
        Some(p) if !p.trim().is_empty() => Ok(()),
        _ => Err(cx.err(
            Some(span),
            "empty command: give the program and its arguments, e.g. [\"python\", \"train.py\"]",
        )),
    }
}

/// Environment names must be non-empty without `=` or NUL, values without NUL: anything
/// else would fail at start or silently set another variable.
fn check_env(cx: &Ctx<'_>, env: &Option<Env>) -> Result<(), ManifestError> {
    for (k, v) in env.iter().flatten() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(cx.err(
                Some(v.span()),
                format!("environment variable name {k:?} is empty or contains '=' or NUL"),
            ));
        }
        if v.get_ref().text().contains('\0') {
            return Err(cx.err(
                Some(v.span()),
                format!("the value of {k} contains a NUL character"),
            ));
        }
    }
    Ok(())
}

fn env_pairs(env: &Option<Env>) -> Vec<(String, String)> {
    env.iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.get_ref().text()))
        .collect()
}

mod template;

#[cfg(test)]
mod tests;
