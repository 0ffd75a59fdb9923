//! `fake-nvml-ctl`: inspect and change the fake NVML state from the shell, for tests and
//! demos. It edits the same state file, under the same lock, as `libfake_nvml.so`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fake_nvml::state::{parse_fault_code, Fault, Fresh, MpsRole, Quirks, State};
use fake_nvml::store::{self, ctl_change, Locked};
use fake_nvml::tables;

#[derive(Parser)]
#[command(
    name = "fake-nvml-ctl",
    about = "Inspect and change the fake NVML state"
)]
struct Cli {
    /// State file (default: $COLLOC_FAKE_NVML_STATE, then /run/colloc-fake-nvml/state.json).
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
        /// Its part in MPS: `server` (listed by nvmlDeviceGetComputeRunningProcesses only)
        /// or `client` (listed by both that and nvmlDeviceGetMPSComputeRunningProcesses).
        #[arg(long)]
        mps: Option<String>,
    },
    /// Set what GPM (Hopper and later) reads of a GPU's SMs from now on: the share of
    /// SMs busy ("SM activity") and of warps active ("SM occupancy"), percent. An A100
    /// keeps them but does not tell (it has no GPM).
    Gpm {
        #[arg(long)]
        gpu: u32,
        /// SM activity, percent (GPM's SM_UTIL).
        #[arg(long)]
        sm_activity: f64,
        /// SM occupancy, percent (GPM's SM_OCCUPANCY).
        #[arg(long, default_value_t = 0.0)]
        occupancy: f64,
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
        /// Placement start slot (default: where the driver would put it).
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
        /// Fail this many calls from the N-th on; 0: every call until `clear-faults`.
        #[arg(long, default_value_t = 1)]
        times: u64,
    },
    /// Remove every fault not yet fired.
    ClearFaults,
    /// Let a call held by a `stall` fault go on.
    Go,
    /// Ask for MIG mode on or off, as nvmlDeviceSetMigMode does; prints the activation
    /// status (Hopper: at once; A100: at once when idle, else pending).
    SetMig {
        #[arg(long)]
        gpu: u32,
        /// on or off
        mode: String,
    },
    /// Reset a GPU: the pending MIG mode takes effect; no instance survives.
    Reset {
        #[arg(long)]
        gpu: u32,
    },
    /// Reboot the node: no instances, processes or holders; Hopper comes up with MIG off,
    /// an A100 in its pending mode.
    Reboot,
    /// A stand-in CUDA probe: the devices a CUDA program given this
    /// `CUDA_VISIBLE_DEVICES` would find, one `GPU-…`/`MIG-…` UUID a line. With MIG
    /// enabled CUDA sees only MIG devices: a GPU in MIG mode given by index or `GPU-…`
    /// UUID yields none. As CUDA does, the list stops at the first entry that names no
    /// device. Prints nothing when it finds none.
    CudaDevices {
        /// The value (default: $CUDA_VISIBLE_DEVICES; unset is refused, exit 2).
        #[arg(long)]
        visible: Option<String>,
    },
    /// Hold a GPU instance (or the whole GPU) as DCGM, dcgm-exporter or a leaked NVML
    /// handle would: no process is listed, yet destroys (and resets) answer IN_USE.
    Hold {
        #[arg(long)]
        gpu: u32,
        /// GPU instance id; without it the whole GPU (nvidia-persistenced, nvidia_drm).
        #[arg(long)]
        gi: Option<u32>,
        /// Who it stands for, shown by `show`.
        #[arg(long, default_value = "dcgm")]
        name: String,
        /// Let go after refusing this many destroy calls (default: hold until released).
        #[arg(long, conflicts_with = "pid")]
        release_after: Option<u32>,
        /// Hold while this real process runs (a job's leftover with a device file open).
        #[arg(long)]
        pid: Option<u32>,
    },
    /// Let go of the holders of a GPU (of one GPU instance with --gi).
    Release {
        #[arg(long)]
        gpu: u32,
        #[arg(long)]
        gi: Option<u32>,
    },
    /// Set the driver's timing quirks (0 turns one off); prints them.
    Quirks {
        /// A destroyed GPU instance stays listed this many more listings.
        #[arg(long)]
        linger_listings: Option<u32>,
        /// A GPU instance answers IN_USE to this many destroys after its last compute
        /// instance went.
        #[arg(long)]
        busy_after_ci_destroy: Option<u32>,
        /// A new MIG device is listed only after this many milliseconds.
        #[arg(long)]
        mig_device_delay_ms: Option<u64>,
        /// Publish no capability file of new instances (on|off).
        #[arg(long)]
        no_caps: Option<String>,
    },
    /// Make every caller unprivileged (`on`: NVML_ERROR_NO_PERMISSION for the calls
    /// nvml.h reserves to privileged users), or let the caller's euid decide (`off`).
    Unprivileged {
        /// on or off
        mode: String,
    },
    /// List the all-media GPU instance profiles (`+me.all`, indexes 15 and 16) as a driver
    /// and card that offer them do (`on`), or not, as the H200 on R580 (`off`, the default).
    AllMedia {
        /// on or off
        mode: String,
    },
    /// Pass a GPU through to a VM: a mode change that needs a reset answers
    /// RESET_REQUIRED.
    Passthrough {
        #[arg(long)]
        gpu: u32,
        /// on or off
        mode: String,
    },
    /// Write a fresh state with these GPUs.
    Init {
        /// Comma list of models: A100-40GB, A100-PCIE-40GB, A100-80GB, A100-80GB-PCIE,
        /// A30, H100-80GB, H100-PCIE, H100-NVL, H200, H200-NVL, GH200-96GB, GH200-144GB,
        /// B200 (or NVML names).
        #[arg(long, default_value = "A100-40GB")]
        gpus: String,
        /// Driver generation to answer as: 535, 550, 570 or 580.
        #[arg(long, default_value_t = 580)]
        driver: u32,
        /// MIG mode at start.
        #[arg(long, default_value = "on")]
        mig: String,
    },
}

/// `on`/`off`, or a one-line error for exit 2.
fn on_off(what: &str, v: &str) -> Result<bool, (String, u8)> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err((format!("{what} must be on or off, not {v:?}"), 2)),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let path = cli.state.clone().unwrap_or_else(store::state_path);
    match run(cli.cmd, &path) {
        Ok(out) => {
            // A reader that went away (`| head`) is not an error of ours.
            use std::io::Write;
            if !out.is_empty() {
                let _ = writeln!(std::io::stdout().lock(), "{out}");
            }
            ExitCode::SUCCESS
        }
        Err((msg, code)) => {
            eprintln!("Error: {msg}");
            ExitCode::from(code)
        }
    }
}

/// A refusal of the fake driver (or of the state file): exit 1.
fn refused(e: String) -> (String, u8) {
    (e, 1)
}

/// Bad input exits 2, refusals of the fake driver 1.
fn run(cmd: Cmd, path: &std::path::Path) -> Result<String, (String, u8)> {
    match cmd {
        Cmd::Show { json } => show_state(path, json),
        Cmd::Attach {
            gpu,
            gi,
            pid,
            mem_mib,
            util,
            mps,
        } => attach(path, gpu, gi, pid, mem_mib, util, mps.as_deref()),
        Cmd::Gpm {
            gpu,
            sm_activity,
            occupancy,
        } => set_gpm(path, gpu, sm_activity, occupancy),
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
        } => create_foreign(path, gpu, &profile, start),
        Cmd::Go => ctl_change(path, |st| {
            st.stalled = false;
            Ok(String::new())
        })
        .map_err(refused),
        Cmd::ClearFaults => ctl_change(path, |st| {
            st.faults.clear();
            Ok(String::new())
        })
        .map_err(refused),
        Cmd::Fault {
            function,
            call,
            code,
            times,
        } => set_fault(path, function, call, code, times),
        Cmd::SetMig { gpu, mode } => set_mig(path, gpu, &mode),
        Cmd::Reset { gpu } => ctl_change(path, |st| {
            st.reset(gpu)
                .map(|()| String::new())
                .map_err(|c| nvml_refusal("resetting the GPU", c))
        })
        .map_err(refused),
        Cmd::CudaDevices { visible } => cuda_devices(path, visible),
        Cmd::Reboot => ctl_change(path, |st| {
            st.reboot();
            Ok(String::new())
        })
        .map_err(refused),
        Cmd::Hold {
            gpu,
            gi,
            name,
            release_after,
            pid,
        } => hold(path, gpu, gi, &name, release_after, pid),
        Cmd::Release { gpu, gi } => ctl_change(path, |st| match st.release(gpu, gi) {
            0 => Err(format!(
                "nothing holds GPU {gpu}{}",
                gi.map_or(String::new(), |g| format!(" instance {g}"))
            )),
            _ => Ok(String::new()),
        })
        .map_err(refused),
        Cmd::Quirks {
            linger_listings,
            busy_after_ci_destroy,
            mig_device_delay_ms,
            no_caps,
        } => set_quirks(
            path,
            linger_listings,
            busy_after_ci_destroy,
            mig_device_delay_ms,
            no_caps.as_deref(),
        ),
        Cmd::Unprivileged { mode } => {
            let on = on_off("unprivileged", &mode)?;
            ctl_change(path, |st| {
                st.unprivileged = on;
                Ok(String::new())
            })
            .map_err(refused)
        }
        Cmd::AllMedia { mode } => {
            let on = on_off("all-media", &mode)?;
            ctl_change(path, |st| {
                st.all_media = on;
                Ok(String::new())
            })
            .map_err(refused)
        }
        Cmd::Passthrough { gpu, mode } => set_passthrough(path, gpu, &mode),
        Cmd::Init { gpus, driver, mig } => init(path, &gpus, driver, &mig),
    }
}

/// `show`: the state, as text or (`--json`) raw JSON.
fn show_state(path: &std::path::Path, json: bool) -> Result<String, (String, u8)> {
    let locked = Locked::open(path).map_err(|e| refused(e.0))?;
    let (state, _) = locked.read().map_err(|e| refused(e.0))?;
    if json {
        serde_json::to_string_pretty(&state).map_err(|e| refused(e.to_string()))
    } else {
        Ok(show(&state))
    }
}

/// `cuda-devices`: what CUDA would enumerate for `visible`.
fn cuda_devices(path: &std::path::Path, visible: Option<String>) -> Result<String, (String, u8)> {
    let Some(visible) = visible.or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok()) else {
        return Err((
            "CUDA_VISIBLE_DEVICES is unset: give --visible LIST (indexes, GPU-… or MIG-… UUIDs)"
                .into(),
            2,
        ));
    };
    let locked = Locked::open(path).map_err(|e| refused(e.0))?;
    let (state, _) = locked.read().map_err(|e| refused(e.0))?;
    Ok(cuda_visible(&state, &visible).join("\n"))
}

/// The CUDA devices of `visible` on `state` (see `cuda-devices`).
fn cuda_visible(state: &State, visible: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in visible.split(',').map(str::trim) {
        let gpu = entry
            .parse::<usize>()
            .ok()
            .and_then(|i| state.gpus.get(i))
            .or_else(|| state.gpus.iter().find(|g| g.uuid == entry));
        if let Some(g) = gpu {
            // A whole GPU in MIG mode is no CUDA device.
            if !g.mig_current {
                out.push(g.uuid.clone());
            }
            continue;
        }
        let mig = state
            .gpus
            .iter()
            .filter(|g| g.mig_current)
            .flat_map(|g| g.gis.iter().flat_map(|gi| gi.cis.iter()))
            .find(|ci| ci.uuid == entry);
        match mig {
            Some(ci) => out.push(ci.uuid.clone()),
            // CUDA ignores the entries after one that names no device.
            None => break,
        }
    }
    out
}

/// `gpm`: what GPM reads of a GPU's SMs from now on.
fn set_gpm(
    path: &std::path::Path,
    gpu: u32,
    sm_activity: f64,
    occupancy: f64,
) -> Result<String, (String, u8)> {
    if ![sm_activity, occupancy]
        .iter()
        .all(|v| (0.0..=100.0).contains(v))
    {
        return Err((
            format!(
                "--sm-activity {sm_activity} --occupancy {occupancy}: give percentages from 0 to 100"
            ),
            2,
        ));
    }
    let now_us = store::now_us();
    ctl_change(path, |st| {
        st.set_gpm(gpu, sm_activity, occupancy, now_us)
            .map(|()| String::new())
    })
    .map_err(refused)
}

/// `attach`: a fake process on a GPU or GPU instance, with its MPS role if any.
fn attach(
    path: &std::path::Path,
    gpu: u32,
    gi: Option<u32>,
    pid: u32,
    mem_mib: u64,
    util: u32,
    mps: Option<&str>,
) -> Result<String, (String, u8)> {
    let role = match mps {
        None => None,
        Some("server") => Some(MpsRole::Server),
        Some("client") => Some(MpsRole::Client),
        Some(other) => return Err((format!("--mps {other}: give server or client"), 2)),
    };
    ctl_change(path, |st| {
        st.attach(gpu, gi, pid, mem_mib, util)?;
        st.set_mps_role(pid, role).map(|()| String::new())
    })
    .map_err(refused)
}

/// `create-foreign`: a GPU instance with one compute instance filling it, made as
/// someone other than colloc would.
fn create_foreign(
    path: &std::path::Path,
    gpu: u32,
    profile: &str,
    start: Option<u32>,
) -> Result<String, (String, u8)> {
    // Check the request against the GPU's model first: bad input exits 2.
    let locked = Locked::open(path).map_err(|e| refused(e.0))?;
    let (current, _) = locked.read().map_err(|e| refused(e.0))?;
    drop(locked);
    let (profile_id, slices, placement) =
        foreign_request(&current, gpu, profile, start).map_err(|e| (e, 2))?;
    ctl_change(path, |st| {
        let gi = st
            .create_gi(gpu, profile_id, placement)
            .map_err(|c| nvml_refusal("creating the GPU instance", c))?;
        let ci_index = (0..8)
            .find(|&i| tables::ci_profile_slices(i) == Some(slices))
            .ok_or_else(|| format!("no compute instance profile of {slices} slices"))?;
        st.create_ci_at(gpu, gi, ci_index, store::now_ms())
            .map_err(|c| nvml_refusal("creating the compute instance", c))?;
        Ok(format!(
            "created GPU instance {gi} ({profile}) on GPU {gpu}"
        ))
    })
    .map_err(refused)
}

/// `fault`: check the function name, call number and code, then record the fault.
fn set_fault(
    path: &std::path::Path,
    function: String,
    call: u64,
    code: String,
    times: u64,
) -> Result<String, (String, u8)> {
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
                times,
            },
        );
        Ok(String::new())
    })
    .map_err(refused)
}

/// `set-mig`: MIG mode on or off, saying when the change is pending.
fn set_mig(path: &std::path::Path, gpu: u32, mode: &str) -> Result<String, (String, u8)> {
    let on = on_off("MIG mode", mode)?;
    ctl_change(path, |st| {
        st.set_mig(gpu, on)
            .map(|status| {
                if status == 0 {
                    String::new()
                } else {
                    format!(
                        "pending: activation status {}",
                        fake_nvml::state::code::name(status)
                    )
                }
            })
            .map_err(|c| nvml_refusal("setting MIG mode", c))
    })
    .map_err(refused)
}

/// `hold`: something holding a GPU or GPU instance, for a number of calls or while a
/// real process runs.
fn hold(
    path: &std::path::Path,
    gpu: u32,
    gi: Option<u32>,
    name: &str,
    release_after: Option<u32>,
    pid: Option<u32>,
) -> Result<String, (String, u8)> {
    if release_after == Some(0) {
        return Err(("--release-after counts from 1".into(), 2));
    }
    ctl_change(path, |st| {
        match pid {
            Some(pid) => st.hold_while(gpu, gi, name, pid),
            None => st.hold(gpu, gi, name, release_after),
        }
        .map(|()| String::new())
    })
    .map_err(refused)
}

/// `quirks`: change the quirks given, keep the others; prints them all.
fn set_quirks(
    path: &std::path::Path,
    linger_listings: Option<u32>,
    busy_after_ci_destroy: Option<u32>,
    mig_device_delay_ms: Option<u64>,
    no_caps: Option<&str>,
) -> Result<String, (String, u8)> {
    let no_caps = no_caps.map(|m| on_off("no-caps", m)).transpose()?;
    ctl_change(path, |st| {
        let q = &mut st.quirks;
        q.no_caps = no_caps.unwrap_or(q.no_caps);
        q.linger_listings = linger_listings.unwrap_or(q.linger_listings);
        q.busy_after_ci_destroy = busy_after_ci_destroy.unwrap_or(q.busy_after_ci_destroy);
        q.mig_device_delay_ms = mig_device_delay_ms.unwrap_or(q.mig_device_delay_ms);
        Ok(quirks_line(q))
    })
    .map_err(refused)
}

/// `passthrough`: one GPU passed through (on) or not (off).
fn set_passthrough(path: &std::path::Path, gpu: u32, mode: &str) -> Result<String, (String, u8)> {
    let on = on_off("passthrough", mode)?;
    ctl_change(path, |st| {
        let n = st.gpus.len();
        let g = st
            .gpus
            .get_mut(gpu as usize)
            .ok_or_else(|| format!("no fake GPU {gpu}; there are {n}"))?;
        g.passthrough = on;
        Ok(String::new())
    })
    .map_err(refused)
}

/// `init`: replace the state with a fresh one of these GPUs, driver and MIG mode.
fn init(
    path: &std::path::Path,
    gpus: &str,
    driver: u32,
    mig: &str,
) -> Result<String, (String, u8)> {
    let opts = Fresh {
        driver,
        mig: on_off("--mig", mig)?,
    };
    let fresh = State::fresh_list_with(gpus, &opts, store::now_ms()).map_err(|e| (e, 2))?;
    ctl_change(path, |st| {
        *st = fresh;
        Ok(String::new())
    })
    .map_err(refused)
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
        .listed(st.driver)
        .find(|p| p.name == profile)
        .ok_or_else(|| {
            let names: Vec<&str> = model.listed(st.driver).map(|p| p.name).collect();
            format!(
                "{} has no profile {profile}; it has {}",
                model.alias,
                names.join(", ")
            )
        })?;
    let placement = match start {
        Some(s) => {
            let all = p.placements();
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

fn quirks_line(q: &Quirks) -> String {
    format!(
        "quirks: linger {} listing(s), GI busy {} destroy(s) after its last CI, MIG device listed after {} ms, capability files {}",
        q.linger_listings,
        q.busy_after_ci_destroy,
        q.mig_device_delay_ms,
        if q.no_caps { "not published" } else { "published" }
    )
}

fn nvml_refusal(what: &str, c: u32) -> String {
    format!(
        "{what}: the fake driver answered {}",
        fake_nvml::state::code::name(c)
    )
}

fn show(st: &State) -> String {
    let mut out = Vec::new();
    out.push(format!(
        "driver {} ({}callers privileged by euid), {}",
        fake_nvml::tables::driver_version(st.driver),
        if st.unprivileged { "no " } else { "" },
        quirks_line(&st.quirks)
    ));
    for (i, g) in st.gpus.iter().enumerate() {
        let name = g.model().map_or("?", |m| m.name);
        let on = |b: bool| if b { "on" } else { "off" };
        out.push(format!(
            "GPU {i}: {name} {} MIG {} (pending {}){}",
            g.uuid,
            on(g.mig_current),
            on(g.mig_pending),
            if g.passthrough {
                ", passed through"
            } else {
                ""
            }
        ));
        for h in &g.holders {
            out.push(format!(
                "  held by {}{}{}",
                h.name,
                h.gi.map_or(" (whole GPU)".to_string(), |id| format!(" on GI {id}")),
                h.release_after.map_or(String::new(), |n| format!(
                    ", lets go after {n} more refusal(s)"
                ))
            ));
        }
        for l in &g.lingering {
            out.push(format!(
                "  GI {} destroyed, still listed {} more time(s)",
                l.gi.id, l.listings
            ));
        }
        for gi in &g.gis {
            let prof = g.gi_profile(gi, st.driver).map_or("?", |p| p.name);
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
            "fault: call {} of {f} -> {} ({} seen, {})",
            fault.call,
            fault.code,
            fault.seen,
            match fault.times {
                0 => "every call".to_string(),
                n => format!("{n} time(s)"),
            }
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
