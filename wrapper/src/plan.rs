//! `colloc plan`: the MIG layout or MPS split a mode would make on a GPU model (read-only,
//! no root needed), and `colloc plan --fit`: a MIG layout for the memory a manifest's runs
//! declare. Each is one typed model ([`Plan`], [`FitPlan`]), printed by the format chosen
//! by name ([`FORMATS`], [`FIT_FORMATS`]; `--json` is `json`, keys sorted as always).

use std::fmt::Write as _;
use std::process::ExitCode;

use colloc_core::mig::{self, Catalog};
use colloc_core::mode::{MigRequest, Mode};
use colloc_core::mps;
use serde::Serialize;

use crate::admin::{catalog_of, config_or_default, open_gpus, parse_mode};
use crate::{bad_input, Global};
use colloc_results::output::{self, Exporter, Formats, Json};

/// `colloc plan MODE (--gpu-model NAME | --gpu INDEX) [--json | --format NAME]`
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The mode, e.g. mig:3g, mig:4g,2g,1g, mps:4.
    #[arg(required_unless_present = "fit", conflicts_with = "fit")]
    mode: Option<String>,
    /// Propose a MIG layout for the runs of this manifest (runs.toml) from the GPU
    /// memory they declare (`gpu_memory`): each run a profile that holds it, as many at
    /// once as fit.
    #[arg(long, value_name = "RUNS_TOML")]
    fit: Option<std::path::PathBuf>,
    /// Plan for a GPU model without a GPU, from colloc's built-in tables: the name NVML
    /// reports ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 NVL", …) or
    /// an alias (A100-40GB, A100-PCIE-40GB, A100-80GB, A100-80GB-PCIE, A30, H100-80GB,
    /// H100-PCIE, H100-NVL, H200, H200-NVL, GH200-96GB, GH200-144GB, B200).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "gpu",
        required_unless_present = "gpu"
    )]
    gpu_model: Option<String>,
    /// Plan for this node's GPU (NVML index), using what the driver reports.
    #[arg(long, value_name = "INDEX")]
    gpu: Option<u32>,
    /// Print JSON; the same as --format json.
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// The output format: text (the default) or json.
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
}

/// The formats of `colloc plan MODE`, the default first: one line each.
pub const FORMATS: Formats<Plan> = Formats {
    command: "colloc plan",
    list: &[&PlanText, &Json::SORTED],
};

/// The formats of `colloc plan --fit`.
pub const FIT_FORMATS: Formats<FitPlan> = Formats {
    command: "colloc plan --fit",
    list: &[&FitText, &Json::SORTED],
};

/// The plan of a mode on a GPU model; its `Serialize` is `colloc plan --json`.
#[derive(Debug, Serialize)]
pub struct Plan {
    /// The mode, normalized.
    pub mode: String,
    /// The GPU model, as NVML names it.
    pub gpu_model: String,
    /// MIG: the mode the job would see in `COLLOC_MODE`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub colloc_mode: Option<String>,
    /// MIG: the instances (none for the other modes).
    pub instances: Vec<PlanInstance>,
    /// `mps:N`: the client slots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
    /// `mps:N`: each client's share of the SMs, in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_thread_percentage: Option<u32>,
    /// `mps:N`: each client's pinned memory limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_mem_limit_mib: Option<u64>,
    /// `mig:LAYOUT:mps[:N]`: the MPS daemon in each instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mps: Option<MigMps>,
    /// `mps:N`: the environment each client gets.
    #[serde(skip)]
    pub client_env: Vec<(String, String)>,
    /// What the mode makes.
    #[serde(skip)]
    pub kind: PlanKind,
}

/// What a mode makes of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// MIG instances (with or without an MPS daemon in each).
    Mig,
    /// One MPS daemon per GPU.
    Mps,
    /// Nothing: the GPU is left as it is (`naive`, `off`).
    AsIs,
}

/// A planned MIG instance.
#[derive(Debug, Serialize)]
pub struct PlanInstance {
    /// Its profile's name.
    pub profile: String,
    /// Its profile's NVML id.
    pub profile_id: u32,
    /// First memory slot.
    pub start: u32,
    /// Memory slots.
    pub size: u32,
    /// Its memory, where the catalog has the profile.
    pub memory_mib: Option<u64>,
    /// Its SMs, where the catalog has the profile.
    pub sms: Option<u32>,
    /// `mig:LAYOUT:mps:N`: client slots in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mps_clients: Option<u32>,
    /// `mig:LAYOUT:mps:N`: each client's share of its SMs, in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_thread_percentage: Option<u32>,
    /// `mig:LAYOUT:mps:N`: each client's pinned memory limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_mem_limit_mib: Option<u64>,
}

/// The MPS part of `mig:LAYOUT:mps[:N]`.
#[derive(Debug, Serialize)]
pub struct MigMps {
    /// N; `None`: clients unlimited.
    pub clients_per_instance: Option<u32>,
    /// Instances × N.
    pub slots: Option<usize>,
}

/// `colloc plan --fit`'s proposal; its `Serialize` is `colloc plan --fit --json`.
#[derive(Debug, Serialize)]
pub struct FitPlan {
    /// The GPU model.
    pub gpu_model: String,
    /// The mode to submit with.
    pub colloc_mode: String,
    /// The instances.
    pub instances: Vec<FitInstance>,
    /// Each run that declares its memory, with its profile.
    pub runs: Vec<FitRun>,
    /// Per profile the runs need (sorted): its memory, its instances, the runs.
    #[serde(skip)]
    pub profiles: Vec<ProfileNeed>,
}

/// An instance of a proposal.
#[derive(Debug, Serialize)]
pub struct FitInstance {
    /// Its profile's name.
    pub profile: String,
    /// Its profile's NVML id.
    pub profile_id: u32,
    /// First memory slot.
    pub start: u32,
    /// Memory slots.
    pub size: u32,
    /// Its memory, where the catalog has the profile.
    pub memory_mib: Option<u64>,
}

/// A run of a proposal.
#[derive(Debug, Serialize)]
pub struct FitRun {
    /// Its name.
    pub name: String,
    /// The memory it declares.
    pub gpu_memory_mib: u64,
    /// The smallest profile that holds it.
    pub profile: String,
}

/// A profile the runs need.
#[derive(Debug)]
pub struct ProfileNeed {
    /// Its name.
    pub profile: String,
    /// Its memory (0 where the catalog lacks it).
    pub memory_mib: u64,
    /// Its instances in the layout.
    pub slots: usize,
    /// The runs that need it.
    pub runs: Vec<String>,
}

impl PlanArgs {
    /// The format asked for by name: `--json` is `json`; none is the default.
    fn format_name(&self) -> Option<&str> {
        if self.json {
            Some("json")
        } else {
            self.format.as_deref()
        }
    }
}

/// `colloc plan`.
pub fn plan(a: PlanArgs, g: &Global) -> anyhow::Result<ExitCode> {
    // Bad input first: the format, the mode or the manifest, before any GPU is asked.
    let name = a.format_name();
    let (format, fit_format) = match a.fit {
        Some(_) => (None, Some(FIT_FORMATS.pick(name)?)),
        None => (Some(FORMATS.pick(name)?), None),
    };
    let mode = a.mode.as_deref().map(parse_mode).transpose()?;
    let fit_runs = match &a.fit {
        Some(path) => Some(fit_needs(path)?),
        None => None,
    };
    let catalog = match (&a.gpu_model, a.gpu) {
        (Some(name), _) => mig::builtin_catalog(name).map_err(|e| bad_input(e.to_string()))?,
        (None, Some(i)) => {
            let cfg = config_or_default(g)?;
            let gpus = open_gpus(&cfg)?;
            catalog_of(&gpus, i)?
        }
        (None, None) => return Err(bad_input("give --gpu-model NAME or --gpu INDEX")),
    };
    if let Some(fit_format) = fit_format {
        let fit = fit_plan(&catalog, &fit_runs.unwrap_or_default())?;
        output::print(fit_format, &fit)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (Some(mode), Some(format)) = (mode, format) else {
        return Err(bad_input("give a MODE or --fit RUNS_TOML"));
    };
    let plan = match &mode {
        Mode::Mig(req) => mig_plan(&catalog, &mode, req, None)?,
        Mode::MigMps { layout, clients } => mig_plan(&catalog, &mode, layout, Some(*clients))?,
        Mode::Mps { clients } => Plan {
            kind: PlanKind::Mps,
            clients: *clients,
            active_thread_percentage: clients.map(|n| 100 / n),
            pinned_mem_limit_mib: clients.map(|n| catalog.memory_total_mib / u64::from(n)),
            client_env: clients
                .map(|n| mps::client_limits(n, &[catalog.memory_total_mib]))
                .unwrap_or_default(),
            ..Plan::as_is(&mode, &catalog)
        },
        Mode::Naive | Mode::Off => Plan::as_is(&mode, &catalog),
    };
    output::print(format, &plan)?;
    Ok(ExitCode::SUCCESS)
}

impl Plan {
    /// A mode that makes no MIG instance.
    fn as_is(mode: &Mode, catalog: &Catalog) -> Plan {
        Plan {
            kind: PlanKind::AsIs,
            mode: mode.to_string(),
            gpu_model: catalog.model.clone(),
            colloc_mode: None,
            instances: Vec::new(),
            clients: None,
            active_thread_percentage: None,
            pinned_mem_limit_mib: None,
            mps: None,
            client_env: Vec::new(),
        }
    }
}

/// The runs of a manifest that declare `gpu_memory`: (name, MiB).
fn fit_needs(path: &std::path::Path) -> anyhow::Result<Vec<(String, u64)>> {
    let specs = crate::run::manifest::load(path).map_err(|e| bad_input(e.to_string()))?;
    Ok(specs
        .iter()
        .filter_map(|s| {
            s.gpu_memory
                .map(|b| (s.name.clone(), b.div_ceil(crate::run::memsize::MIB)))
        })
        .collect())
}

/// `colloc plan --fit runs.toml`: a MIG layout for the runs' declared memory.
fn fit_plan(catalog: &Catalog, runs: &[(String, u64)]) -> anyhow::Result<FitPlan> {
    let p = crate::run::fit::propose(catalog, runs).map_err(bad_input)?;
    let mut names: Vec<&str> = p.runs.iter().map(|r| r.2.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let profiles = names
        .into_iter()
        .map(|prof| ProfileNeed {
            profile: prof.to_string(),
            memory_mib: catalog
                .profiles
                .iter()
                .find(|q| q.name == prof)
                .map_or(0, |q| q.memory_mib),
            slots: p.instances.iter().filter(|i| i.profile == prof).count(),
            runs: p
                .runs
                .iter()
                .filter(|r| r.2 == prof)
                .map(|r| r.0.clone())
                .collect(),
        })
        .collect();
    Ok(FitPlan {
        gpu_model: catalog.model.clone(),
        colloc_mode: p.mode,
        instances: p
            .instances
            .iter()
            .map(|i| FitInstance {
                profile: i.profile.clone(),
                profile_id: i.profile_id,
                start: i.placement.start,
                size: i.placement.size,
                memory_mib: catalog.by_id(i.profile_id).map(|p| p.memory_mib),
            })
            .collect(),
        runs: p
            .runs
            .into_iter()
            .map(|(name, gpu_memory_mib, profile)| FitRun {
                name,
                gpu_memory_mib,
                profile,
            })
            .collect(),
        profiles,
    })
}

/// The plan of a MIG layout; `mps`: `Some(clients)` for one MPS daemon inside each
/// instance (`mig:LAYOUT:mps[:N]`), each instance's clients limited to 1/N of it.
fn mig_plan(
    catalog: &Catalog,
    mode: &Mode,
    req: &MigRequest,
    mps: Option<Option<u32>>,
) -> anyhow::Result<Plan> {
    let instances = catalog.plan(req).map_err(|e| bad_input(e.to_string()))?;
    if let Some(Some(n)) = mps {
        catalog
            .check_mps_clients(&mode.to_string(), &instances, n)
            .map_err(|e| bad_input(e.to_string()))?;
    }
    let per_instance = |p: Option<&mig::Profile>| match (mps, p) {
        (Some(Some(n)), Some(p)) => (Some(n), Some(100 / n), Some(p.memory_mib / u64::from(n))),
        _ => (None, None, None),
    };
    Ok(Plan {
        kind: PlanKind::Mig,
        colloc_mode: Some(mig::layout_mode_string(&instances)),
        instances: instances
            .iter()
            .map(|i| {
                let p = catalog.by_id(i.profile_id);
                let (mps_clients, active_thread_percentage, pinned_mem_limit_mib) = per_instance(p);
                PlanInstance {
                    profile: i.profile.clone(),
                    profile_id: i.profile_id,
                    start: i.placement.start,
                    size: i.placement.size,
                    memory_mib: p.map(|p| p.memory_mib),
                    sms: p.map(|p| p.sms),
                    mps_clients,
                    active_thread_percentage,
                    pinned_mem_limit_mib,
                }
            })
            .collect(),
        mps: mps.map(|clients| MigMps {
            clients_per_instance: clients,
            slots: clients.map(|n| instances.len() * n as usize),
        }),
        ..Plan::as_is(mode, catalog)
    })
}

/// A plan as text: what is made, and the instances with their memory and SMs.
pub struct PlanText;

impl Exporter<Plan> for PlanText {
    fn name(&self) -> &'static str {
        "text"
    }

    fn render(&self, p: &Plan) -> anyhow::Result<String> {
        let mut out = String::new();
        let model = &p.gpu_model;
        match (p.kind, p.clients) {
            (PlanKind::Mig, _) => {}
            (PlanKind::AsIs, _) => {
                let _ = writeln!(out, "{} on {model}: the GPU is left as it is", p.mode);
                return Ok(out);
            }
            (PlanKind::Mps, Some(n)) => {
                let _ = writeln!(
                    out,
                    "{} on {model}: one MPS daemon per GPU, {n} client slot(s), each limited to:",
                    p.mode
                );
                for (k, val) in &p.client_env {
                    let _ = writeln!(out, "  {k}={val}");
                }
                return Ok(out);
            }
            (PlanKind::Mps, None) => {
                let _ = writeln!(
                    out,
                    "mps on {model}: one MPS daemon per GPU, clients unlimited (no thread or memory limit)"
                );
                return Ok(out);
            }
        }
        let _ = writeln!(
            out,
            "{} on {model}: {} MIG instance(s), COLLOC_MODE={}",
            p.mode,
            p.instances.len(),
            p.colloc_mode.as_deref().unwrap_or_default()
        );
        match p.mps.as_ref().map(|m| m.clients_per_instance) {
            Some(Some(n)) => {
                let _ = writeln!(
                    out,
                    "  one MPS daemon per instance, {n} client slot(s) in each ({} in all), each \
                     client limited to {}% of its instance's SMs and 1/{n} of its memory",
                    p.instances.len() * n as usize,
                    100 / n
                );
            }
            Some(None) => {
                let _ = writeln!(
                    out,
                    "  one MPS daemon per instance, clients unlimited (no thread or memory limit)"
                );
            }
            None => {}
        }
        // A MIG placement (where an instance sits in the GPU's memory slots) is not a
        // `colloc run` slot (where one run goes): say "placement", "start", "size".
        let _ = writeln!(
            out,
            "  {:<12} {:<18} {:>10}  {:>3}",
            "profile", "placement", "memory", "SMs"
        );
        for i in &p.instances {
            let _ = writeln!(
                out,
                "  {:<12} {:<18} {:>6} MiB  {:>3}",
                i.profile,
                format!("start {} size {}", i.start, i.size),
                i.memory_mib.unwrap_or(0),
                i.sms.unwrap_or(0)
            );
        }
        Ok(out)
    }
}

/// A proposal as text: the mode to submit with, and per profile its runs.
pub struct FitText;

impl Exporter<FitPlan> for FitText {
    fn name(&self) -> &'static str {
        "text"
    }

    fn render(&self, p: &FitPlan) -> anyhow::Result<String> {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} runs declare gpu_memory; on {}: sbatch --colloc={} ({} MIG instance(s), as many runs at once)",
            p.runs.len(),
            p.gpu_model,
            p.colloc_mode,
            p.instances.len()
        );
        let _ = writeln!(
            out,
            "  {:<12} {:>10}  {:>5}  runs that need it",
            "profile", "memory", "slots"
        );
        for prof in &p.profiles {
            let names: Vec<&str> = prof.runs.iter().map(String::as_str).collect();
            let _ = writeln!(
                out,
                "  {:<12} {:>6} MiB  {:>5}  {} ({})",
                prof.profile,
                prof.memory_mib,
                prof.slots,
                names.len(),
                crate::run::fit::shorten(&names, 6)
            );
        }
        let _ = writeln!(
            out,
            "A run goes to the smallest free instance that holds it; runs whose profile has no \
             instance of its own use a larger one. Check with `colloc plan {} --gpu-model {:?}`.",
            p.colloc_mode, p.gpu_model
        );
        Ok(out)
    }
}
