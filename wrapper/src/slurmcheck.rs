//! `colloc check-config`: the node's Slurm settings that defeat colloc (issue 34), each
//! named with what breaks and the fix, before a job meets them. Read from `slurm.conf`
//! (`$SLURM_CONF`, else /etc/slurm/slurm.conf), the `plugstack.conf` it names (and the
//! files that includes) and `gres.conf` beside it; judged by [`findings`], a pure
//! function. Every finding is a warning: advice never keeps a node (or slurmd, after the
//! boot unit) down.

use std::path::{Path, PathBuf};

use colloc_core::config::Config;
use colloc_core::mode::ModeKind;
use colloc_core::slurmconf::{self, PlugstackLine, SlurmConfError};

/// What of the node's Slurm configuration the checks read.
#[derive(Debug, Default)]
pub struct SlurmView {
    /// The `slurm.conf` read.
    pub slurm_conf: PathBuf,
    /// Its `Key=Value` pairs (with its includes).
    pub pairs: Vec<(String, String)>,
    /// The plugstack.conf read, and its plugin lines.
    pub plugstack: PathBuf,
    /// Plugin lines of plugstack.conf and what it includes.
    pub plugins: Vec<PlugstackLine>,
    /// The text of gres.conf beside slurm.conf (`None`: no such file).
    pub gres_conf: Option<String>,
}

impl SlurmView {
    /// Read the node's Slurm configuration; `Ok(None)` without a slurm.conf.
    ///
    /// # Errors
    /// A file that cannot be read or that is not root's alone.
    pub fn of_node() -> Result<Option<SlurmView>, SlurmConfError> {
        let slurm_conf = colloc_core::slurmconf::SlurmFacts::conf_path();
        let pairs = match slurmconf::load_pairs(&slurm_conf) {
            Err(SlurmConfError::Read(e)) if e.is_not_found() => return Ok(None),
            r => r?,
        };
        let beside = |name: &str| slurm_conf.with_file_name(name);
        let plugstack = slurmconf::value(&pairs, "PlugStackConfig")
            .map_or_else(|| beside("plugstack.conf"), PathBuf::from);
        let plugins = slurmconf::load_plugstack(&plugstack)?;
        let gres_conf = slurmconf::read_text(&beside("gres.conf"))?;
        Ok(Some(SlurmView {
            slurm_conf,
            pairs,
            plugstack,
            plugins,
            gres_conf,
        }))
    }

    fn get(&self, key: &str) -> Option<&str> {
        slurmconf::value(&self.pairs, key).map(str::trim)
    }

    /// The words of a comma list setting, lower case.
    fn list(&self, key: &str) -> Vec<String> {
        self.get(key)
            .unwrap_or("")
            .split(',')
            .map(|w| w.trim().to_ascii_lowercase())
            .filter(|w| !w.is_empty())
            .collect()
    }

    fn is(&self, key: &str, value: &str) -> bool {
        self.get(key).is_some_and(|v| v.eq_ignore_ascii_case(value))
    }

    /// gres.conf says `AutoDetect=nvml` (on any line).
    fn autodetect_nvml(&self) -> bool {
        self.gres_conf.as_deref().is_some_and(|t| {
            slurmconf::parse_pairs(t).0.iter().any(|(k, v)| {
                k.eq_ignore_ascii_case("autodetect") && v.eq_ignore_ascii_case("nvml")
            })
        })
    }
}

/// Is this plugstack line colloc's plugin?
fn is_colloc(line: &PlugstackLine) -> bool {
    Path::new(&line.plugin)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains("colloc"))
}

/// The longest a colloc prolog can take on this node, in seconds, for the modes it
/// offers (docs/design.md, "Budgets"; a GPU lock held by another colloc process not
/// counted).
pub fn longest_prolog_s(cfg: &Config) -> u64 {
    let mig = &cfg.mig;
    if cfg.allowed_modes.contains(&ModeKind::Mig) {
        // mig:LAYOUT:mps: leftovers 5, earlier tree 5, exited processes 2, MPS start 20,
        // kill 5, MPS undo 20, MIG undo 15, record 5 = 77, plus the budget and each
        // configured hook.
        let hooks = [&mig.pre_hook, &mig.post_hook]
            .iter()
            .filter(|h| !h.is_empty())
            .count() as u64;
        77 + mig.apply_budget_s + hooks * mig.hook_timeout_s
    } else if cfg.allowed_modes.contains(&ModeKind::Mps) {
        // leftovers 5, exited processes 2, MPS prolog 50, record 5.
        62
    } else {
        // leftovers 5, exited processes 2, record 5.
        12
    }
}

/// What of `view` defeats colloc as `cfg` (read from `config`) sets it up: one line per
/// setting, saying what breaks and the fix.
pub fn findings(view: &SlurmView, cfg: &Config, config: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let conf = view.slurm_conf.display();
    let mig = cfg.allowed_modes.contains(&ModeKind::Mig);
    plugstack_findings(view, config, &mut out);
    if mig && view.is("AcctGatherEnergyType", "acct_gather_energy/gpu") {
        out.push(format!(
            "{conf}: AcctGatherEnergyType=acct_gather_energy/gpu keeps NVML open in slurmd \
             and every slurmstepd; while another process holds it, MIG instances cannot be \
             created or destroyed (mig jobs are refused as busy, an epilog's restore can fail \
             and drain the node): use another AcctGatherEnergyType on colloc nodes"
        ));
    }
    let gathers = view
        .get("JobAcctGatherType")
        .is_some_and(|t| !t.eq_ignore_ascii_case("jobacct_gather/none"));
    let gpu_acct_off = view
        .list("JobAcctGatherParams")
        .iter()
        .any(|p| p == "disablegpuacct");
    if view.autodetect_nvml() {
        if mig && gathers && !gpu_acct_off {
            out.push(format!(
                "{conf}: JobAcctGatherType={} with gres.conf's AutoDetect=nvml: slurmstepd \
                 keeps NVML open for each job's GPU accounting, and while it is open no \
                 other process can change the GPU's MIG instances: set \
                 JobAcctGatherParams=DisableGPUAcct (Slurm 23.02.7 and later), or drop \
                 AutoDetect=nvml",
                view.get("JobAcctGatherType").unwrap_or_default()
            ));
        }
        out.push(
            "gres.conf has AutoDetect=nvml: Slurm then counts MIG instances as GPUs and \
             drains a node whose count changes, and cannot follow the instances colloc \
             makes inside a job: on colloc nodes list the GPUs with static \
             `Name=gpu File=/dev/nvidiaN` lines and no AutoDetect"
                .to_string(),
        );
    }
    let flags = view.list("PrologFlags");
    if !flags.iter().any(|f| f == "alloc") {
        out.push(format!(
            "{conf}: PrologFlags has no Alloc: colloc's prolog then runs only when a job's \
             first step starts, so an salloc without srun never has its GPUs set up and a \
             batch job's setup counts against its first step: set PrologFlags=Alloc (with \
             Contain where a job container is used)"
        ));
    }
    if view.is("NamespaceType", "namespace/linux") && !flags.iter().any(|f| f == "contain") {
        out.push(format!(
            "{conf}: NamespaceType=namespace/linux without PrologFlags=Contain: each job \
             gets a private /tmp and /dev/shm after the prolog, and colloc starts a job's \
             MPS daemons inside them from the extern step, which needs Contain; without it \
             mps jobs are refused"
        ));
    }
    if let Some(t) = view.get("PrologEpilogTimeout") {
        let need = longest_prolog_s(cfg);
        match t.parse::<u64>() {
            Ok(secs) if secs < need => out.push(format!(
                "{conf}: PrologEpilogTimeout={secs} is shorter than colloc's longest prolog \
                 with this configuration ({need} s, docs/design.md \"Budgets\"): Slurm kills \
                 a prolog that runs longer and drains the node; set it to at least {need} \
                 (300 is the advice)"
            )),
            _ => {}
        }
    }
    out
}

/// What the plugstack lines say: no colloc line, an `optional` one, another config file.
fn plugstack_findings(view: &SlurmView, config: &Path, out: &mut Vec<String>) {
    let file = view.plugstack.display();
    let lines: Vec<&PlugstackLine> = view.plugins.iter().filter(|l| is_colloc(l)).collect();
    if lines.is_empty() {
        out.push(format!(
            "{file} has no line that loads colloc: --colloc is unknown to sbatch and no job \
             on this node is set up; add `required <path>/libcolloc_spank.so config={}` and \
             restart slurmd (slurmd runs a plugin's prolog only if it loaded it when it \
             started)",
            config.display()
        ));
        return;
    }
    for l in lines {
        if !l.required {
            out.push(format!(
                "{file} loads colloc as optional: Slurm then ignores colloc's refusals, so a \
                 job colloc refuses (a mode this node does not allow, a layout that does not \
                 fit, a busy GPU) runs anyway on its whole GPUs, with no collocation and no \
                 COLLOC_MODE; use `required` on GPU nodes once check-config is clean here"
            ));
        }
        let named = l
            .args
            .iter()
            .find_map(|a| a.strip_prefix("config="))
            .unwrap_or(colloc_core::config::DEFAULT_PATH);
        if Path::new(named) != config {
            out.push(format!(
                "{file} gives colloc config={named}, not {}: jobs use that file, not the one \
                 checked",
                config.display()
            ));
        }
    }
}

/// check-config's Slurm warnings for `cfg` (read from `config`): [`findings`] of the
/// node's configuration, and a running slurmd that started before colloc was enabled.
/// Nothing without a slurm.conf (a host that is not a Slurm node).
pub fn node_warnings(cfg: &Config, config: &Path) -> Vec<String> {
    let view = match SlurmView::of_node() {
        Ok(Some(v)) => v,
        Ok(None) => return Vec::new(),
        // check-config has said so already (its job container check reads it first).
        Err(e) => {
            log::info!("cannot read the node's Slurm configuration: {e}");
            return Vec::new();
        }
    };
    let mut out = findings(&view, cfg, config);
    if view.plugins.iter().any(is_colloc) {
        if let Some(pid) = stale_slurmd(&view, cfg) {
            out.push(format!(
                "slurmd (pid {pid}) started before colloc's plugstack.conf line was added: it                  runs no colloc prolog, and every --colloc job here fails until slurmd is                  restarted (`systemctl restart slurmd`)"
            ));
        }
    }
    out
}

/// The pid of this node's running slurmd where it did not load colloc.
fn stale_slurmd(view: &SlurmView, cfg: &Config) -> Option<u32> {
    use colloc_core::slurmdmark::{self, SlurmdLoaded};
    let facts = colloc_core::slurmconf::SlurmFacts::from_pairs(&view.pairs);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let host = host.trim().split('.').next()?.to_string();
    let pid = slurmdmark::slurmd_pid(&facts.slurmd_pid_file(&host, &host))?;
    match slurmdmark::slurmd_loaded(&cfg.state_dir, pid) {
        SlurmdLoaded::No { pid } => Some(pid),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(slurm_conf: &str, plugstack: &str, gres: Option<&str>) -> SlurmView {
        SlurmView {
            slurm_conf: PathBuf::from("/etc/slurm/slurm.conf"),
            pairs: slurmconf::parse_pairs(slurm_conf).0,
            plugstack: PathBuf::from("/etc/slurm/plugstack.conf"),
            plugins: slurmconf::parse_plugstack(plugstack).0,
            gres_conf: gres.map(str::to_string),
        }
    }

    const GOOD: &str = "PrologFlags=Alloc,Contain\nJobAcctGatherType=jobacct_gather/cgroup\n\
                        PrologEpilogTimeout=300\n";
    const LINE: &str = "required /usr/lib/slurm/libcolloc_spank.so config=/etc/slurm/colloc.toml\n";
    const STATIC_GRES: &str = "Name=gpu File=/dev/nvidia0\n";

    fn cfg() -> Config {
        Config::default()
    }

    fn toml() -> &'static Path {
        Path::new("/etc/slurm/colloc.toml")
    }

    #[test]
    fn a_node_set_up_as_the_docs_say_has_nothing_to_fix() {
        let v = view(GOOD, LINE, Some(STATIC_GRES));
        assert_eq!(findings(&v, &cfg(), toml()), Vec::<String>::new());
    }

    #[test]
    fn gpu_accounting_that_holds_nvml_is_named_with_its_fix() {
        let mut c = cfg();
        let v = view(GOOD, LINE, Some("AutoDetect=nvml\n"));
        let f = findings(&v, &c, toml()).join("\n");
        assert!(
            f.contains("JobAcctGatherParams=DisableGPUAcct (Slurm 23.02.7"),
            "{f}"
        );
        assert!(f.contains("AutoDetect=nvml: Slurm then counts MIG"), "{f}");
        let off = format!("{GOOD}JobAcctGatherParams=UsePss,DisableGPUAcct\n");
        let f = findings(&view(&off, LINE, Some("AutoDetect=nvml\n")), &c, toml()).join("\n");
        assert!(!f.contains("DisableGPUAcct"), "{f}");
        let energy = format!("{GOOD}AcctGatherEnergyType=acct_gather_energy/gpu\n");
        let f = findings(&view(&energy, LINE, Some(STATIC_GRES)), &c, toml());
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].contains("acct_gather_energy/gpu keeps NVML open"),
            "{f:?}"
        );
        // Without mig on offer nothing needs NVML free.
        c.allowed_modes.retain(|m| *m != ModeKind::Mig);
        assert!(findings(&view(&energy, LINE, Some(STATIC_GRES)), &c, toml()).is_empty());
    }

    #[test]
    fn optional_missing_and_other_config_lines_are_named() {
        let opt = LINE.replace("required", "optional");
        let f = findings(&view(GOOD, &opt, None), &cfg(), toml());
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("loads colloc as optional"), "{f:?}");
        assert!(f[0].contains("runs anyway on its whole GPUs"), "{f:?}");
        let f = findings(&view(GOOD, "required /x/other.so\n", None), &cfg(), toml());
        assert!(f[0].contains("has no line that loads colloc"), "{f:?}");
        assert!(f[0].contains("restart slurmd"), "{f:?}");
        let f = findings(&view(GOOD, LINE, None), &cfg(), Path::new("/tmp/x.toml"));
        assert!(
            f[0].contains("config=/etc/slurm/colloc.toml, not /tmp/x.toml"),
            "{f:?}"
        );
    }

    #[test]
    fn prolog_flags_namespace_and_timeout() {
        let f = findings(
            &view(
                "PrologFlags=Contain\nPrologEpilogTimeout=120\nNamespaceType=namespace/linux\n",
                LINE,
                None,
            ),
            &cfg(),
            toml(),
        );
        let all = f.join("\n");
        assert!(all.contains("PrologFlags has no Alloc"), "{all}");
        assert!(!all.contains("NamespaceType"), "{all}");
        // Defaults with mig, no hooks: 77 + 60; with both hooks 2 * 30 more.
        assert_eq!(longest_prolog_s(&cfg()), 137);
        let mut hooked = cfg();
        hooked.mig.pre_hook = vec!["/bin/true".into()];
        hooked.mig.post_hook = vec!["/bin/true".into()];
        assert_eq!(longest_prolog_s(&hooked), 197);
        assert!(all.contains("PrologEpilogTimeout=120 is shorter than colloc's longest prolog with this configuration (137 s"), "{all}");
        let f = findings(
            &view(
                "PrologFlags=Alloc\nNamespaceType=namespace/linux\n",
                LINE,
                None,
            ),
            &cfg(),
            toml(),
        );
        assert!(
            f[0].contains("NamespaceType=namespace/linux without PrologFlags=Contain"),
            "{f:?}"
        );
    }
}
