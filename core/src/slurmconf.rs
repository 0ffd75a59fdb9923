//! What colloc needs to know of the node's Slurm configuration: whether jobs have an
//! extern step (`PrologFlags=Contain`), and whether they run in a job container
//! (`JobContainerType=job_container/tmpfs`) and where it keeps its files (`BasePath` in
//! `job_container.conf` next to `slurm.conf`).
//!
//! Why it matters (docs/slurm-callbacks.md): under `job_container/tmpfs` each job gets a
//! private `/tmp` and `/dev/shm`, made after the prolog. An MPS daemon the prolog started
//! does not share the job's `/dev/shm`, so colloc starts the job's daemons from the extern
//! step instead, inside the job's namespace; and colloc's own files must not lie where a
//! job cannot see them (`/tmp`, `/dev/shm`, `BasePath`).
//!
//! `slurm.conf` is `$SLURM_CONF` (slurmd passes it on to the prolog and to slurmstepd,
//! also in configless mode), else `/etc/slurm/slurm.conf`. Only a file root can trust is
//! read (root's, writable by no one else), with a size cap; `Include` lines are followed
//! (absolute, or relative to `slurm.conf`'s folder; four levels deep at most). Keys are
//! case-insensitive, as Slurm reads them.

use std::path::{Path, PathBuf};

use crate::fs::FsError;

/// Where `slurm.conf` is unless `SLURM_CONF` says otherwise.
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";
/// slurmd's pid file where slurm.conf names none (Slurm 22.05 to 25.11).
pub const DEFAULT_SLURMD_PID_FILE: &str = "/var/run/slurmd.pid";
/// The job container plugin that makes `/tmp` and `/dev/shm` private to each job.
pub const TMPFS_PLUGIN: &str = "job_container/tmpfs";
/// Slurm 25.11's namespace plugin, `job_container/tmpfs` renamed.
pub const NAMESPACE_PLUGIN: &str = "namespace/linux";
/// Largest Slurm configuration file read.
const CONF_LIMIT: u64 = 16 << 20;
/// Deepest chain of `Include` lines followed.
const INCLUDE_DEPTH: u32 = 4;

/// The facts colloc uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmFacts {
    /// The `slurm.conf` read.
    pub slurm_conf: PathBuf,
    /// `PrologFlags` has `Contain`: each job has an extern step on each of its nodes.
    pub contain: bool,
    /// `PrologFlags` has `Serial`: prologs and epilogs of a node run one at a time.
    pub serial: bool,
    /// `JobContainerType=job_container/tmpfs`: each job has a private `/tmp` and
    /// `/dev/shm`.
    pub tmpfs_container: bool,
    /// The `BasePath`s of `job_container.conf` (the global one and those of `NodeName`
    /// lines); empty without a job container or without the file.
    pub base_paths: Vec<PathBuf>,
    /// `SlurmdPidFile` as written (`%n`, `%h` not filled in); `None` for Slurm's default.
    pub slurmd_pid_file: Option<String>,
    /// Slurm's GPU accounting may keep NVML open in each job's slurmstepd: a
    /// `JobAcctGatherType` other than `jobacct_gather/none` without
    /// `JobAcctGatherParams=DisableGPUAcct` (Slurm's gres documentation).
    pub gpu_acct: bool,
    /// `AcctGatherEnergyType=acct_gather_energy/gpu`: keeps NVML loaded in slurmd.
    pub energy_gpu: bool,
}

/// Why the Slurm configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SlurmConfError {
    /// A file could not be read or is not one root can trust.
    #[error("{0}")]
    Read(#[from] FsError),
    /// An `Include` chain deeper than colloc follows (or a loop).
    #[error("{path}: Include lines nested more than {INCLUDE_DEPTH} deep")]
    TooDeep {
        /// The file with the Include too many.
        path: PathBuf,
    },
}

impl SlurmFacts {
    /// The `slurm.conf` of this node: `$SLURM_CONF`, else [`DEFAULT_SLURM_CONF`].
    pub fn conf_path() -> PathBuf {
        match std::env::var_os("SLURM_CONF") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULT_SLURM_CONF),
        }
    }

    /// Read the facts of the node's `slurm.conf` ([`SlurmFacts::conf_path`]); `Ok(None)`
    /// where there is no such file (a host without Slurm's configuration).
    ///
    /// # Errors
    /// [`SlurmConfError`]: unreadable, not root's alone, or Includes too deep.
    pub fn of_node() -> Result<Option<SlurmFacts>, SlurmConfError> {
        let path = SlurmFacts::conf_path();
        match SlurmFacts::load(&path) {
            Err(SlurmConfError::Read(e)) if e.is_not_found() => Ok(None),
            r => r.map(Some),
        }
    }

    /// Read the facts of the `slurm.conf` at `path` and of the `job_container.conf`
    /// beside it.
    ///
    /// # Errors
    /// [`SlurmConfError`].
    pub fn load(path: &Path) -> Result<SlurmFacts, SlurmConfError> {
        let mut pairs = Vec::new();
        read_conf(path, 0, &mut pairs)?;
        let mut facts = SlurmFacts::from_pairs(&pairs);
        facts.slurm_conf = path.to_path_buf();
        if facts.tmpfs_container {
            let jc = path.with_file_name("job_container.conf");
            match crate::fs::open_trusted_file(&jc) {
                Ok(f) => {
                    let bytes = crate::fs::read_file_capped(f, &jc, CONF_LIMIT)?;
                    facts.base_paths = base_paths(&String::from_utf8_lossy(&bytes));
                }
                // No job_container.conf: Slurm then refuses to start the plugin; nothing
                // to say about BasePath.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(facts)
    }

    /// The facts of `key=value` pairs (keys in any case), as [`parse_pairs`] gives them.
    pub fn from_pairs(pairs: &[(String, String)]) -> SlurmFacts {
        let mut facts = SlurmFacts::default();
        let (mut gather, mut no_gpu_acct) = (false, false);
        for (k, v) in pairs {
            let lc = v.trim().to_ascii_lowercase();
            match k.to_ascii_lowercase().as_str() {
                "jobacctgathertype" => gather = !lc.is_empty() && lc != "jobacct_gather/none",
                "jobacctgatherparams" => {
                    no_gpu_acct = lc.split(',').any(|p| p.trim() == "disablegpuacct");
                }
                "acctgatherenergytype" => facts.energy_gpu = lc == "acct_gather_energy/gpu",
                _ => {}
            }
        }
        facts.gpu_acct = gather && !no_gpu_acct;
        for (k, v) in pairs {
            match k.to_ascii_lowercase().as_str() {
                "prologflags" => {
                    let flags: Vec<String> = v
                        .split(',')
                        .map(|f| f.trim().to_ascii_lowercase())
                        .collect();
                    facts.contain = flags.iter().any(|f| f == "contain");
                    facts.serial = flags.iter().any(|f| f == "serial");
                }
                "jobcontainertype" => {
                    facts.tmpfs_container |= v.trim().eq_ignore_ascii_case(TMPFS_PLUGIN);
                }
                // Slurm 25.11's successor of job_container/tmpfs: the same private /tmp
                // and /dev/shm per job.
                "namespacetype" => {
                    facts.tmpfs_container |= v.trim().eq_ignore_ascii_case(NAMESPACE_PLUGIN);
                }
                "slurmdpidfile" => facts.slurmd_pid_file = Some(v.trim().to_string()),
                _ => {}
            }
        }
        facts
    }

    /// The pid file of node `node`'s slurmd on host `host`: `SlurmdPidFile` with `%n` and
    /// `%h` filled in, else Slurm's default [`DEFAULT_SLURMD_PID_FILE`].
    pub fn slurmd_pid_file(&self, node: &str, host: &str) -> PathBuf {
        match &self.slurmd_pid_file {
            Some(t) => PathBuf::from(t.replace("%n", node).replace("%h", host)),
            None => PathBuf::from(DEFAULT_SLURMD_PID_FILE),
        }
    }

    /// The directories a job container makes private to each job: `/tmp`, `/dev/shm`
    /// and the container's `BasePath`s. Empty without `job_container/tmpfs`.
    pub fn private_dirs(&self) -> Vec<PathBuf> {
        if !self.tmpfs_container {
            return Vec::new();
        }
        let mut dirs = vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")];
        dirs.extend(self.base_paths.iter().cloned());
        dirs
    }
}

/// The `Key=Value` pairs of the `slurm.conf` at `path` and the files it includes, in
/// file order (a later one wins, as in Slurm).
///
/// # Errors
/// [`SlurmConfError`].
pub fn load_pairs(path: &Path) -> Result<Vec<(String, String)>, SlurmConfError> {
    let mut pairs = Vec::new();
    read_conf(path, 0, &mut pairs)?;
    Ok(pairs)
}

/// The last value of `key` (any case) in `pairs`.
pub fn value<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

/// The text of a file root can trust, `None` where it does not exist.
///
/// # Errors
/// [`SlurmConfError::Read`]: unreadable or not root's alone.
pub fn read_text(path: &Path) -> Result<Option<String>, SlurmConfError> {
    match crate::fs::open_trusted_file(path) {
        Ok(f) => {
            let bytes = crate::fs::read_file_capped(f, path, CONF_LIMIT)?;
            Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One plugin line of a plugstack.conf: `required` or `optional`, the plugin's path and
/// its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlugstackLine {
    /// `required` (a failing callback fails the job) rather than `optional`.
    pub required: bool,
    /// The plugin's path as written.
    pub plugin: String,
    /// The words after it.
    pub args: Vec<String>,
}

/// The plugin lines of a plugstack.conf text and the patterns its `include` lines name.
pub fn parse_plugstack(text: &str) -> (Vec<PlugstackLine>, Vec<String>) {
    let mut lines = Vec::new();
    let mut includes = Vec::new();
    for line in text.lines() {
        let mut words = strip_comment(line).split_whitespace();
        let Some(first) = words.next() else { continue };
        match first.to_ascii_lowercase().as_str() {
            "include" => includes.extend(words.next().map(str::to_string)),
            kind @ ("required" | "optional") => {
                if let Some(plugin) = words.next() {
                    lines.push(PlugstackLine {
                        required: kind == "required",
                        plugin: plugin.to_string(),
                        args: words.map(str::to_string).collect(),
                    });
                }
            }
            _ => {}
        }
    }
    (lines, includes)
}

/// The plugin lines of the plugstack.conf at `path` and of the files its `include` lines
/// name (a `*` in the file name part matches any text; one level of includes, as the
/// packages ship `plugstack.conf.d/*.conf`).
///
/// # Errors
/// [`SlurmConfError`]: a file that cannot be read or is not root's alone.
pub fn load_plugstack(path: &Path) -> Result<Vec<PlugstackLine>, SlurmConfError> {
    let Some(text) = read_text(path)? else {
        return Ok(Vec::new());
    };
    let (mut lines, includes) = parse_plugstack(&text);
    for pattern in includes {
        for file in expand_include(path, &pattern) {
            if let Some(t) = read_text(&file)? {
                lines.extend(parse_plugstack(&t).0);
            }
        }
    }
    Ok(lines)
}

/// The files an include pattern names, relative to the folder of `from`, sorted.
fn expand_include(from: &Path, pattern: &str) -> Vec<PathBuf> {
    let p = PathBuf::from(pattern);
    let p = if p.is_absolute() {
        p
    } else {
        from.parent().unwrap_or(Path::new("/")).join(p)
    };
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some((prefix, suffix)) = name.split_once('*') else {
        return vec![p];
    };
    let dir = p.parent().unwrap_or(Path::new("/"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            (n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix))
                .then(|| e.path())
        })
        .collect();
    files.sort();
    files
}

/// Read `path` (and what it includes) into `pairs`.
fn read_conf(
    path: &Path,
    depth: u32,
    pairs: &mut Vec<(String, String)>,
) -> Result<(), SlurmConfError> {
    if depth > INCLUDE_DEPTH {
        return Err(SlurmConfError::TooDeep {
            path: path.to_path_buf(),
        });
    }
    let f = crate::fs::open_trusted_file(path)?;
    let bytes = crate::fs::read_file_capped(f, path, CONF_LIMIT)?;
    let text = String::from_utf8_lossy(&bytes);
    let (found, includes) = parse_pairs(&text);
    pairs.extend(found);
    for inc in includes {
        let inc = PathBuf::from(inc);
        let inc = if inc.is_absolute() {
            inc
        } else {
            path.parent().unwrap_or(Path::new("/")).join(inc)
        };
        match read_conf(&inc, depth + 1, pairs) {
            // Slurm itself refuses a missing include; for colloc's questions the rest of
            // the file still answers.
            Err(SlurmConfError::Read(e)) if e.is_not_found() => {
                log::debug!("{}: included file missing", inc.display());
            }
            r => r?,
        }
    }
    Ok(())
}

/// The `Key=Value` words of a Slurm configuration text (comments removed; the first word
/// of each line and the ones after it, as on `NodeName=` lines), and the files its
/// `Include` lines name.
pub fn parse_pairs(text: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut pairs = Vec::new();
    let mut includes = Vec::new();
    for line in text.lines() {
        let line = strip_comment(line);
        let mut words = line.split_whitespace().peekable();
        if words
            .peek()
            .is_some_and(|w| w.eq_ignore_ascii_case("include"))
        {
            words.next();
            includes.extend(words.next().map(str::to_string));
            continue;
        }
        for w in words {
            if let Some((k, v)) = w.split_once('=') {
                pairs.push((k.to_string(), v.trim_matches('"').to_string()));
            }
        }
    }
    (pairs, includes)
}

/// A line without its comment: from the first `#` that is not escaped (`\#`).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1] != b'\\') {
            return &line[..i];
        }
    }
    line
}

/// The `BasePath` values of a `job_container.conf`, absolute ones only, without
/// duplicates.
pub fn base_paths(text: &str) -> Vec<PathBuf> {
    let (pairs, _) = parse_pairs(text);
    let mut out: Vec<PathBuf> = Vec::new();
    for (k, v) in pairs {
        let p = PathBuf::from(v);
        if k.eq_ignore_ascii_case("basepath") && p.is_absolute() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_comments_and_includes() {
        let text = "# a comment\nSlurmctldHost=h(127.0.0.1) # trailing\n\
                    prologflags=alloc,CONTAIN\nJobContainerType=job_container/tmpfs\n\
                    NodeName=n1 CPUs=4 Gres=gpu:2\ninclude nodes.conf\nInclude /etc/x.conf\n\
                    Comment=a\\#b\n";
        let (pairs, includes) = parse_pairs(text);
        assert_eq!(includes, vec!["nodes.conf", "/etc/x.conf"]);
        assert!(pairs.contains(&("CPUs".into(), "4".into())));
        assert!(pairs.contains(&("Comment".into(), "a\\#b".into())));
        assert!(!pairs.iter().any(|(k, _)| k.contains('#')));
        let f = SlurmFacts::from_pairs(&pairs);
        assert!(f.contain && f.tmpfs_container && !f.serial);
        assert_eq!(f.private_dirs().len(), 2);
        assert_eq!(
            f.slurmd_pid_file("n1", "h"),
            PathBuf::from(DEFAULT_SLURMD_PID_FILE)
        );
        let f = SlurmFacts::from_pairs(&parse_pairs("SlurmdPidFile=/run/slurmd-%n-%h.pid\n").0);
        assert_eq!(
            f.slurmd_pid_file("n1", "h"),
            PathBuf::from("/run/slurmd-n1-h.pid")
        );
    }

    #[test]
    fn gpu_accounting_that_holds_nvml() {
        let facts = |text: &str| SlurmFacts::from_pairs(&parse_pairs(text).0);
        assert!(facts("JobAcctGatherType=jobacct_gather/cgroup\n").gpu_acct);
        assert!(
            !facts("JobAcctGatherType=jobacct_gather/cgroup\nJobAcctGatherParams=NoShared,DisableGPUAcct\n")
                .gpu_acct
        );
        assert!(!facts("JobAcctGatherType=jobacct_gather/none\n").gpu_acct);
        assert!(facts("AcctGatherEnergyType=acct_gather_energy/gpu\n").energy_gpu);
    }

    #[test]
    fn flags_and_plugins() {
        let facts = |t: &str| SlurmFacts::from_pairs(&parse_pairs(t).0);
        assert!(!facts("PrologFlags=Alloc\n").contain);
        assert!(facts("PrologFlags=Alloc,Contain,Serial\n").serial);
        assert!(!facts("PrologFlags=NoContain\n").contain);
        assert!(!facts("JobContainerType=job_container/none\n").tmpfs_container);
        assert!(facts("JOBCONTAINERTYPE=Job_Container/TMPFS\n").tmpfs_container);
        assert!(facts("NamespaceType=namespace/linux\n").tmpfs_container);
        assert!(facts("#JobContainerType=job_container/tmpfs\n")
            .private_dirs()
            .is_empty());
    }

    #[test]
    fn plugstack_lines_and_includes() {
        let t = "# optional /x/libcolloc_spank.so\nrequired /usr/lib/a.so x=1 y\n\
                 Optional /lib/libcolloc_spank.so config=/etc/slurm/colloc.toml\n\
                 include /etc/slurm/plugstack.conf.d/*.conf\nbogus line\n";
        let (lines, includes) = parse_plugstack(t);
        assert_eq!(includes, vec!["/etc/slurm/plugstack.conf.d/*.conf"]);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].required && lines[0].args == ["x=1", "y"]);
        assert!(!lines[1].required && lines[1].plugin == "/lib/libcolloc_spank.so");
    }

    #[test]
    fn plugstack_includes_are_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("plugstack.conf.d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("colloc.conf"), "optional /l/libcolloc_spank.so\n").unwrap();
        std::fs::write(d.join("other.txt"), "required /l/other.so\n").unwrap();
        let main = tmp.path().join("plugstack.conf");
        std::fs::write(&main, "include plugstack.conf.d/*.conf\n").unwrap();
        let lines = load_plugstack(&main).unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0].plugin, "/l/libcolloc_spank.so");
        assert!(load_plugstack(&tmp.path().join("none.conf"))
            .unwrap()
            .is_empty());
        let (pairs, _) = parse_pairs("A=1\na=2\n");
        assert_eq!(value(&pairs, "A"), Some("2"));
    }

    #[test]
    fn base_paths_of_job_container_conf() {
        let t = "AutoBasePath=true\nBasePath=/var/spool/jc\n\
                 NodeName=gpu[01-04] BasePath=/local/jc\nNodeName=x BasePath=rel\n\
                 BasePath=/var/spool/jc\n";
        assert_eq!(
            base_paths(t),
            vec![PathBuf::from("/var/spool/jc"), PathBuf::from("/local/jc")]
        );
    }

    #[test]
    fn files_and_includes_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let conf = tmp.path().join("slurm.conf");
        std::fs::write(
            &conf,
            "ClusterName=x\nInclude more.conf\nInclude missing.conf\n",
        )
        .unwrap();
        std::fs::write(
            tmp.path().join("more.conf"),
            "PrologFlags=Alloc,Contain\nJobContainerType=job_container/tmpfs\n",
        )
        .unwrap();
        std::fs::write(
            tmp.path().join("job_container.conf"),
            "AutoBasePath=true\nBasePath=/var/spool/jc\n",
        )
        .unwrap();
        let f = SlurmFacts::load(&conf).unwrap();
        assert!(f.contain && f.tmpfs_container);
        assert_eq!(
            f.private_dirs(),
            vec![
                PathBuf::from("/tmp"),
                PathBuf::from("/dev/shm"),
                PathBuf::from("/var/spool/jc")
            ]
        );
        // An include loop ends with an error, not a hang.
        std::fs::write(tmp.path().join("more.conf"), "Include more.conf\n").unwrap();
        let e = SlurmFacts::load(&conf).unwrap_err().to_string();
        assert!(e.contains("nested more than 4 deep"), "{e}");
        // A file others may change is not read.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = SlurmFacts::load(&conf).unwrap_err().to_string();
        assert!(e.contains("mode 0666"), "{e}");
    }
}
