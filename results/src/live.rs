//! What a running `colloc run` says of its running runs, for the node's metrics (issue
//! 38): each run's name, device, start, last throughput and GPU figures so far.
//!
//! `colloc run` inside a Slurm job serves this as JSON on an abstract Unix socket named
//! [`SOCKET_PREFIX`]`<job>/<pid>.<random>` (no file a user could swap, nothing left
//! behind when it ends); root's `colloc status` reads every such socket whose peer is
//! the job's own user ([`Live::parse`] bounds and checks what it reads). The figures are
//! the user's own claims about their own runs, so they are labelled with the job and
//! user root knows, never with anything the text says of itself beyond the run.

use serde::{Deserialize, Serialize};

/// The start of the abstract socket names `colloc run` serves on.
pub const SOCKET_PREFIX: &str = "colloc-live/";
/// The schema of [`Live`].
pub const SCHEMA: u32 = 1;
/// The most bytes a reader takes from one socket.
pub const MAX_BYTES: usize = 256 * 1024;
/// The most runs one snapshot may list (more than any node runs at once).
pub const MAX_RUNS: usize = 256;
/// The largest figure a reader takes: 2^53, the largest integer every reader of the
/// metrics (a float parser and an integer parser alike) reads the same.
pub const MAX_FIGURE: f64 = 9_007_199_254_740_992.0;
/// The longest run name, device and unit, in characters (a run name is at most 100).
const MAX_NAME: usize = 100;
const MAX_DEVICE: usize = 64;
const MAX_UNIT: usize = 24;

/// A snapshot of one `colloc run`'s running runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Live {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The Slurm job it runs in.
    pub job: u32,
    /// The runs running now.
    pub runs: Vec<LiveRun>,
}

/// One running run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveRun {
    /// Its name.
    pub name: String,
    /// Its index in the manifest.
    pub index: u32,
    /// Its attempt (1 the first).
    pub attempt: u32,
    /// The slot it runs on (below [`MAX_RUNS`]): the metrics' figures are per slot, so
    /// their series last the pack, not each run.
    pub slot: u32,
    /// The CUDA device of its slot (GPU or MIG UUID), where known.
    pub device: Option<String>,
    /// When this attempt started, Unix seconds.
    pub started_unix: f64,
    /// Its last throughput sample, and the sample's unit.
    pub throughput: Option<f64>,
    /// The throughput's unit.
    pub unit: Option<String>,
    /// The most GPU memory its processes held at once so far, bytes.
    pub memory_peak_bytes: Option<u64>,
    /// Mean SM utilization of its own processes so far, 0 to 1 (where NVML can say).
    pub util_ratio: Option<f64>,
    /// Its time share of its GPU's energy so far, joules.
    pub energy_joules: Option<f64>,
}

impl Live {
    /// Read a snapshot as a reader must: at most [`MAX_BYTES`], JSON of this schema, at
    /// most [`MAX_RUNS`] runs, names, devices and units short and of printable
    /// characters, every figure finite and not negative.
    ///
    /// # Errors
    /// What is wrong, in a few words.
    pub fn parse(bytes: &[u8]) -> Result<Live, String> {
        if bytes.len() > MAX_BYTES {
            return Err(format!("more than {MAX_BYTES} bytes"));
        }
        let live: Live =
            serde_json::from_slice(bytes).map_err(|e| format!("not a snapshot: {e}"))?;
        if live.schema != SCHEMA {
            return Err(format!(
                "schema {} (this colloc reads {SCHEMA})",
                live.schema
            ));
        }
        if live.runs.len() > MAX_RUNS {
            return Err(format!("{} runs (at most {MAX_RUNS})", live.runs.len()));
        }
        for r in &live.runs {
            check_text("run name", &r.name, MAX_NAME)?;
            if r.name.is_empty() {
                return Err("a run without a name".into());
            }
            if let Some(d) = &r.device {
                check_text("device", d, MAX_DEVICE)?;
            }
            if let Some(u) = &r.unit {
                check_text("unit", u, MAX_UNIT)?;
            }
            let figures = [
                Some(r.started_unix),
                r.throughput,
                r.util_ratio,
                r.energy_joules,
            ];
            if figures
                .iter()
                .flatten()
                .any(|x| !x.is_finite() || *x < 0.0 || *x > MAX_FIGURE)
                || r.memory_peak_bytes.is_some_and(|b| b > 1 << 53)
            {
                return Err(format!(
                    "run {:?}: a figure not finite, below 0 or above 2^53",
                    r.name
                ));
            }
            if r.slot as usize >= MAX_RUNS {
                return Err(format!(
                    "run {:?}: slot {} (below {MAX_RUNS})",
                    r.name, r.slot
                ));
            }
            if r.util_ratio.is_some_and(|u| u > 1.0) {
                return Err(format!("run {:?}: a utilization above 1", r.name));
            }
        }
        Ok(live)
    }

    /// The snapshot as it is served: compact JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

fn check_text(what: &str, s: &str, max: usize) -> Result<(), String> {
    if s.chars().count() > max {
        return Err(format!("a {what} longer than {max} characters"));
    }
    if s.chars().any(|c| c.is_control() || invisible(c)) {
        return Err(format!("a {what} with a control or format character"));
    }
    Ok(())
}

/// Characters that change how the text around them shows without showing themselves:
/// bidirectional overrides and isolates, zero-width ones, line and paragraph
/// separators, the soft hyphen, the byte order mark, tag characters.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}' | '\u{e0000}'..='\u{e007f}')
}

/// The job an abstract socket name says it serves (`colloc-live/<job>/…`), or `None`
/// for another name.
pub fn job_of_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(SOCKET_PREFIX)?;
    let (job, tail) = rest.split_once('/')?;
    if tail.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) || job.len() > 10 {
        return None;
    }
    job.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str) -> LiveRun {
        LiveRun {
            name: name.into(),
            index: 3,
            attempt: 1,
            slot: 2,
            device: Some("MIG-0123".into()),
            started_unix: 1_700_000_000.5,
            throughput: Some(812.5),
            unit: Some("img/s".into()),
            memory_peak_bytes: Some(3 << 30),
            util_ratio: Some(0.25),
            energy_joules: Some(1200.0),
        }
    }

    #[test]
    fn a_snapshot_reads_back_as_served() {
        let live = Live {
            schema: SCHEMA,
            job: 42,
            runs: vec![run("lr0.1-seed1"), run("lr0.1-seed2")],
        };
        assert_eq!(Live::parse(&live.to_bytes()), Ok(live));
    }

    #[test]
    fn what_a_reader_refuses() {
        let with = |f: &dyn Fn(&mut Live)| {
            let mut l = Live {
                schema: SCHEMA,
                job: 1,
                runs: vec![run("a")],
            };
            f(&mut l);
            Live::parse(&l.to_bytes()).unwrap_err()
        };
        assert!(with(&|l| l.schema = 2).contains("schema 2"));
        assert!(with(&|l| l.runs = vec![run("a"); MAX_RUNS + 1]).contains("runs"));
        assert!(with(&|l| l.runs[0].name = "x".repeat(101)).contains("longer"));
        assert!(with(&|l| l.runs[0].name = "a\nb".into()).contains("control"));
        assert!(with(&|l| l.runs[0].name = String::new()).contains("without a name"));
        assert!(with(&|l| l.runs[0].unit = Some("u".repeat(25))).contains("unit"));
        assert!(with(&|l| l.runs[0].device = Some("\u{1b}[2J".into())).contains("control"));
        assert!(with(&|l| l.runs[0].throughput = Some(-1.0)).contains("below 0"));
        assert!(with(&|l| l.runs[0].throughput = Some(1e23)).contains("2^53"));
        assert!(with(&|l| l.runs[0].memory_peak_bytes = Some((1 << 53) + 1)).contains("2^53"));
        assert!(with(&|l| l.runs[0].name = "bidi\u{202e}x".into()).contains("format"));
        assert!(with(&|l| l.runs[0].name = "a\u{2028}b".into()).contains("format"));
        assert!(with(&|l| l.runs[0].name = "tag\u{e0041}".into()).contains("format"));
        assert!(with(&|l| l.runs[0].slot = MAX_RUNS as u32).contains("slot"));
        assert!(with(&|l| l.runs[0].util_ratio = Some(1.5)).contains("above 1"));
        // JSON has no NaN: a serializer writes null, which is simply no figure.
        assert!(Live::parse(br#"{"schema":1,"job":1,"runs":[],"extra":1}"#).is_err());
        assert!(Live::parse(br#"{"schema":1,"job":1,"runs":[{"name":"a","index":0,"attempt":1,"slot":0,"device":null,"started_unix":1e999,"throughput":null,"unit":null,"memory_peak_bytes":null,"util_ratio":null,"energy_joules":null}]}"#).is_err());
        assert!(Live::parse(&vec![b' '; MAX_BYTES + 1])
            .unwrap_err()
            .contains("bytes"));
        assert!(Live::parse(b"not json").is_err());
    }

    #[test]
    fn the_job_is_read_from_a_socket_name() {
        assert_eq!(job_of_name("colloc-live/42/1234.9f3a"), Some(42));
        assert_eq!(job_of_name("colloc-live/42/"), None);
        assert_eq!(job_of_name("colloc-live/4x/1"), None);
        assert_eq!(job_of_name("colloc-live/+42/1"), None);
        assert_eq!(job_of_name("colloc-live/99999999999/1"), None);
        assert_eq!(job_of_name("other/42/1"), None);
    }
}
