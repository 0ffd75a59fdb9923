//! `fake-nvml-ctl`: inspect and change the fake NVML state from the shell, for tests and
//! demos. It edits the same state file, under the same lock, as `libfake_nvml.so`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fake_nvml::state::{parse_fault_code, Fault, State};
use fake_nvml::store::{self, ctl_change, Locked};
use fake_nvml::tables;

#[derive(Parser)]
#[command(
    name = "fake-nvml-ctl",
    about = "Inspect and change the fake NVML state"
)]
struct Cli {
    /// State file (default: $COLLOC_FAKE_NVML_STATE, then /tmp/colloc-fake-nvml/state.json).
    #[arg(long, global = true)]
    state: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the GPUs, instances, processes and faults.
    Show {
        /// Print the raw state as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Attach a fake process (a compute context) to a GPU or one of its GPU instances.
    Attach {
        #[arg(long)]
        gpu: u32,
        /// GPU instance id (MIG mode).
        #[arg(long)]
        gi: Option<u32>,
        #[arg(long)]
        pid: u32,
        /// GPU memory it uses, MiB.
        #[arg(long, default_value_t = 256)]
        mem_mib: u64,
        /// SM utilisation it reports, percent.
        #[arg(long, default_value_t = 0)]
        util: u32,
    },
    /// Detach a fake process.
    Detach {
        #[arg(long)]
        pid: u32,
    },
    /// Create a GPU instance with one full compute instance, as someone else would.
    CreateForeign {
        #[arg(long)]
        gpu: u32,
        /// Profile name, e.g. 3g.20gb.
        #[arg(long)]
        profile: String,
        /// Placement start slot (default: first free).
        #[arg(long)]
        start: Option<u32>,
    },
    /// Make the N-th next call of an NVML function fail with CODE, or crash the caller.
    Fault {
        /// NVML function name, e.g. nvmlGpuInstanceCreateComputeInstance.
        function: String,
        #[arg(long, default_value_t = 1)]
        call: u64,
        /// nvml.h error name (NVML_ERROR_IN_USE or IN_USE), a number, or `crash`.
        #[arg(long)]
        code: String,
    },
    /// Ask for MIG mode on or off (pending until `reset`).
    SetMig {
        #[arg(long)]
        gpu: u32,
        /// on or off
        mode: String,
    },
    /// Reset a GPU: the pending MIG mode takes effect.
    Reset {
        #[arg(long)]
        gpu: u32,
    },
    /// Write a fresh state with these GPUs (comma list of A100-40GB, A100-80GB, H100-80GB, H200).
    Init {
        #[arg(long, default_value = "A100-40GB")]
        gpus: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let path = cli.state.clone().unwrap_or_else(store::state_path);
    match run(cli.cmd, &path) {
        Ok(out) => {
            if !out.is_empty() {
                println!("{out}");
            }
            ExitCode::SUCCESS
        }
        Err((msg, code)) => {
            eprintln!("Error: {msg}");
            ExitCode::from(code)
        }
    }
}

/// Bad input exits 2, refusals of the fake driver 1.
fn run(cmd: Cmd, path: &std::path::Path) -> Result<String, (String, u8)> {
    let refused = |e: String| (e, 1);
    match cmd {
        Cmd::Show { json } => {
            let locked = Locked::open(path).map_err(|e| refused(e.0))?;
            let (state, _) = locked.read().map_err(|e| refused(e.0))?;
            if json {
                serde_json::to_string_pretty(&state).map_err(|e| refused(e.to_string()))
            } else {
                Ok(show(&state))
            }
        }
        Cmd::Attach {
            gpu,
            gi,
            pid,
            mem_mib,
            util,
        } => ctl_change(path, |st| {
            st.attach(gpu, gi, pid, mem_mib, util)
                .map(|()| String::new())
        })
        .map_err(refused),
        Cmd::Detach { pid } => ctl_change(path, |st| {
            if st.detach(pid) {
                Ok(String::new())
            } else {
                Err(format!("pid {pid} is not attached to any fake GPU"))
            }
        })
        .map_err(refused),
        Cmd::CreateForeign {
            gpu,
            profile,
            start,
        } => {
            // Check the request against the GPU's model first: bad input exits 2.
            let locked = Locked::open(path).map_err(|e| refused(e.0))?;
            let (current, _) = locked.read().map_err(|e| refused(e.0))?;
            drop(locked);
            let (profile_id, slices, placement) =
                foreign_request(&current, gpu, &profile, start).map_err(|e| (e, 2))?;
            ctl_change(path, |st| {
                let gi = st
                    .create_gi(gpu, profile_id, placement)
                    .map_err(|c| nvml_refusal("creating the GPU instance", c))?;
                let ci_index = tables::CI_PROFILES
                    .iter()
                    .find(|(_, s)| *s == slices)
                    .map(|(i, _)| *i)
                    .ok_or_else(|| format!("no compute instance profile of {slices} slices"))?;
                st.create_ci(gpu, gi, ci_index)
                    .map_err(|c| nvml_refusal("creating the compute instance", c))?;
                Ok(format!(
                    "created GPU instance {gi} ({profile}) on GPU {gpu}"
                ))
            })
            .map_err(refused)
        }
        Cmd::Fault {
            function,
            call,
            code,
        } => {
            if !function.starts_with("nvml") {
                return Err((
                    format!("{function:?} is not an NVML function name (they start with nvml)"),
                    2,
                ));
            }
            if call == 0 {
                return Err(("--call counts from 1 (the next call)".into(), 2));
            }
            if parse_fault_code(&code).is_none() {
                return Err((
                    format!("unknown fault code {code:?}; use an nvml.h error name such as NVML_ERROR_INSUFFICIENT_RESOURCES, a number, or crash"),
                    2,
                ));
            }
            ctl_change(path, |st| {
                st.faults.insert(
                    function,
                    Fault {
                        call,
                        code,
                        seen: 0,
                    },
                );
                Ok(String::new())
            })
            .map_err(refused)
        }
        Cmd::SetMig { gpu, mode } => {
            let on = match mode.as_str() {
                "on" => true,
                "off" => false,
                _ => return Err((format!("MIG mode must be on or off, not {mode:?}"), 2)),
            };
            ctl_change(path, |st| {
                st.set_mig(gpu, on)
                    .map(|_| String::new())
                    .map_err(|c| nvml_refusal("setting MIG mode", c))
            })
            .map_err(refused)
        }
        Cmd::Reset { gpu } => ctl_change(path, |st| {
            st.reset(gpu)
                .map(|()| String::new())
                .map_err(|c| nvml_refusal("resetting the GPU", c))
        })
        .map_err(refused),
        Cmd::Init { gpus } => {
            let fresh = State::fresh_from_list(&gpus, store::now_ms()).map_err(|e| (e, 2))?;
            ctl_change(path, |st| {
                *st = fresh;
                Ok(String::new())
            })
            .map_err(refused)
        }
    }
}

/// Profile id, slices and placement (start, size) of a `create-foreign` request.
type ForeignRequest = (u32, u32, Option<(u32, u32)>);

/// A `create-foreign` request checked against the GPU's model, or why it is invalid.
fn foreign_request(
    st: &State,
    gpu: u32,
    profile: &str,
    start: Option<u32>,
) -> Result<ForeignRequest, String> {
    let g = st
        .gpus
        .get(gpu as usize)
        .ok_or_else(|| format!("no fake GPU {gpu}; there are {}", st.gpus.len()))?;
    let model = g
        .model()
        .map_err(|_| format!("GPU {gpu} has an unknown model {}", g.model))?;
    let p = model
        .profiles
        .iter()
        .find(|p| p.name == profile)
        .ok_or_else(|| {
            let names: Vec<&str> = model.profiles.iter().map(|p| p.name).collect();
            format!(
                "{} has no profile {profile}; it has {}",
                model.alias,
                names.join(", ")
            )
        })?;
    let placement = match start {
        Some(s) => {
            let all = tables::placements(p);
            let found = all.iter().copied().find(|(st, _)| *st == s);
            let starts: Vec<String> = all.iter().map(|(st, _)| st.to_string()).collect();
            Some(found.ok_or_else(|| {
                format!(
                    "{profile} cannot start at slot {s}; it starts at {}",
                    starts.join(", ")
                )
            })?)
        }
        None => None,
    };
    Ok((p.id, p.slices, placement))
}

fn nvml_refusal(what: &str, c: u32) -> String {
    format!(
        "{what}: the fake driver answered {}",
        fake_nvml::state::code::name(c)
    )
}

fn show(st: &State) -> String {
    let mut out = Vec::new();
    for (i, g) in st.gpus.iter().enumerate() {
        let name = g.model().map_or("?", |m| m.name);
        let on = |b: bool| if b { "on" } else { "off" };
        out.push(format!(
            "GPU {i}: {name} {} MIG {} (pending {})",
            g.uuid,
            on(g.mig_current),
            on(g.mig_pending)
        ));
        for gi in &g.gis {
            let prof = g.gi_profile(gi).map_or("?", |p| p.name);
            let cis: Vec<String> = gi
                .cis
                .iter()
                .map(|c| format!("CI {} {}", c.id, c.uuid))
                .collect();
            out.push(format!(
                "  GI {} {prof} at {}+{}: {}",
                gi.id,
                gi.start,
                gi.size,
                if cis.is_empty() {
                    "no compute instance".into()
                } else {
                    cis.join(", ")
                }
            ));
        }
        for p in &g.processes {
            let on_gi = p.gi.map_or(String::new(), |id| format!(" on GI {id}"));
            out.push(format!("  process {}{on_gi}, {} MiB", p.pid, p.mem_mib));
        }
    }
    for (f, fault) in &st.faults {
        out.push(format!(
            "fault: call {} of {f} -> {} ({} seen)",
            fault.call, fault.code, fault.seen
        ));
    }
    for f in &st.fired {
        out.push(format!(
            "fired: {} -> {} in pid {}",
            f.function, f.code, f.pid
        ));
    }
    out.join("\n")
}
