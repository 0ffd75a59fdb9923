//! The job's `AdminComment` and how Slurm's tools name it alone, from `scontrol --json
//! show job` or 22.05's `squeue --json`, read as it comes (jobsummary.rs writes it).

/// What `squeue --json` says of a job that the writer needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Queued {
    /// Its `AdminComment` (`""` when unset).
    pub admin_comment: String,
    /// How `scontrol update` and `sacctmgr modify job` name it alone: `ARRAY_TASK` for an
    /// array task (an array's last task has the array's own id, which both take for every
    /// task), `HETJOB+OFFSET` for a component of a heterogeneous job (the leader's id
    /// stands for every component), else the job id.
    pub target: String,
}

/// A number as `squeue --json` writes it: plain (Slurm 22.05's v0.0.38) or
/// `{"set": true, "number": N}` (23.02 and later).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum JsonNumber {
    Plain(u64),
    Set { set: bool, number: Option<u64> },
    Other(serde::de::IgnoredAny),
}

impl JsonNumber {
    fn get(&self) -> Option<u64> {
        match self {
            JsonNumber::Plain(n) => Some(*n),
            JsonNumber::Set { set: true, number } => *number,
            _ => None,
        }
    }
}

/// A JSON string as bytes, UTF-8 or not: another job's comment, which may hold
/// anything, never stops the read.
struct RawText(Vec<u8>);

impl<'de> serde::Deserialize<'de> for RawText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = RawText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<RawText, E> {
                Ok(RawText(v.to_vec()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawText, E> {
                Ok(RawText(v.as_bytes().to_vec()))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// The fields of one job of the `jobs` list that the writer needs; the rest of each job
/// is skipped as it is read (never held: a user's long job name costs time, not memory).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct JobFields {
    job_id: Option<JsonNumber>,
    admin_comment: Option<RawText>,
    array_job_id: Option<JsonNumber>,
    array_task_id: Option<JsonNumber>,
    het_job_id: Option<JsonNumber>,
    het_job_offset: Option<JsonNumber>,
}

/// The whole answer: `{"jobs": [...], ...}`, of which only job `job` is kept.
struct FindJob(u32);

impl<'de> serde::de::DeserializeSeed<'de> for FindJob {
    type Value = Option<Queued>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FindJob {
    type Value = Option<Queued>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object with a jobs list")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "jobs" {
                found = m.next_value_seed(FindInList(self.0))?;
            } else {
                m.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The `jobs` list, one job at a time.
struct FindInList(u32);

impl<'de> serde::de::DeserializeSeed<'de> for FindInList {
    type Value = Option<Queued>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FindInList {
    type Value = Option<Queued>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of jobs")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        let job = self.0;
        let mut found = None;
        while let Some(j) = s.next_element::<JobFields>()? {
            let n = |v: &Option<JsonNumber>| v.as_ref().and_then(JsonNumber::get);
            if found.is_some() || n(&j.job_id) != Some(u64::from(job)) {
                continue;
            }
            let array = n(&j.array_job_id).filter(|&a| a > 0);
            let het = n(&j.het_job_id).filter(|&h| h > 0);
            let target = match (array, n(&j.array_task_id), het, n(&j.het_job_offset)) {
                (Some(a), Some(t), _, _) => format!("{a}_{t}"),
                (_, _, Some(h), Some(o)) => format!("{h}+{o}"),
                _ => job.to_string(),
            };
            // Not UTF-8: left as it is, never written back changed.
            let admin_comment = String::from_utf8(j.admin_comment.map_or_else(Vec::new, |c| c.0))
                .map_err(|_| {
                serde::de::Error::custom(format!(
                    "job {job}'s AdminComment is not UTF-8: left as it is"
                ))
            })?;
            found = Some(Queued {
                admin_comment,
                target,
            });
        }
        Ok(found)
    }
}

/// Job `job` in `scontrol --json show job JOB`'s or `squeue --json`'s output (the same
/// `jobs` list), read as it comes: only the job's own fields are kept, so a queue whose
/// answer is hundreds of MiB (22.05's `squeue --json` lists every job, and a user's
/// fields can be long) costs time, not memory. JSON, not `scontrol show job`'s text:
/// there a job name, a command or a working directory holding a newline (all the
/// user's) can make a line that reads `AdminComment=` (our red team's find).
///
/// # Errors
/// Not JSON, or the job is not in it.
pub fn read_squeue_json(out: impl std::io::Read, job: u32) -> Result<Queued, String> {
    use serde::de::DeserializeSeed as _;
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(out));
    let found = FindJob(job)
        .deserialize(&mut de)
        .and_then(|f| de.end().map(|()| f))
        .map_err(|e| match e.classify() {
            serde_json::error::Category::Data => format!("squeue --json: {e}"),
            _ => format!("squeue --json: not JSON ({e})"),
        })?;
    found.ok_or_else(|| format!("squeue --json does not list job {job}"))
}

/// [`read_squeue_json`] of an answer held whole.
///
/// # Errors
/// As [`read_squeue_json`].
pub fn parse_squeue_json(out: &str, job: u32) -> Result<Queued, String> {
    read_squeue_json(out.as_bytes(), job)
}
