//! `colloc run`: pack many runs onto the allocation's slots, keep a durable record of how
//! each did, and resume where an earlier pack stopped.
//!
//! - [`args`]: the flags, checked into options.
//! - [`manifest`]: `runs.toml` into run specs, every error caught before anything starts.
//! - [`programs`]: every command's program found before anything starts.
//! - [`retry`]: which failed runs start again, from the flags and `runs.toml`.
//! - [`slots`]: the slot layout from the job environment or `--mode`/`-j`.
//! - [`setup`]: report directory (fresh or resumed), GPUs, MPS, sampler, baseline.
//! - [`scheduler`]: what the pack engine runs, and what an attempt's end means.
//! - [`record`]: the event log, the report rebuilt from it, written atomically.
//! - [`nodes`], [`steps`]: in a Slurm job of several nodes, every node's slots, and each
//!   run as a Slurm step of its own on the node of its slot (docs/multinode.md).
//! - [`timelimit`]: the warning before the job's time limit, and the job's requeue.

use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;

use crate::bad_input;
use crate::engine::launch::{Launcher, LocalLauncher};
use crate::engine::pack::{
    Deadline, Driver, Engine, Options as EngineOptions, Outcome, Slot, Warn,
};
use crate::engine::signals::Signals;
use crate::engine::Clock;
use colloc_results::export::runs;
use colloc_results::record::events::{Event, RunIdentity, SlotRecord, EVENTS_VERSION};
use colloc_results::record::fold::Fold;
use colloc_results::telemetry::Sampler;

pub mod accounting;
pub mod args;
pub mod fit;
pub mod live;
pub mod manifest;
pub mod memsize;
pub mod nodes;
pub mod programs;
pub mod record;
pub mod retry;
pub mod scheduler;
pub mod setup;
pub mod slots;
pub mod steps;
pub mod timelimit;

pub use args::RunArgs;
use setup::Start;

/// How often the engine calls back (progress, status, report writes).
const TICK: Duration = Duration::from_millis(200);

/// The Slurm job whose nodes get runs as steps (`--steps`), if any: with `auto`, a job of
/// several nodes, from its batch script or an allocation's shell (not from inside a step).
///
/// # Errors
/// `--steps on` outside a Slurm job (bad input).
fn steps_job(when: args::Steps) -> anyhow::Result<Option<String>> {
    let job = std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|j| !j.trim().is_empty());
    let nodes: u32 = std::env::var("SLURM_JOB_NUM_NODES")
        .or_else(|_| std::env::var("SLURM_NNODES"))
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(1);
    // Inside a step's task (`srun -N3 colloc run …`, one colloc per node) each colloc
    // keeps to its own node, as before.
    let in_step = std::env::var_os("SLURM_STEP_ID").is_some();
    Ok(match when {
        args::Steps::Off => None,
        args::Steps::Auto => job.filter(|_| nodes > 1 && !in_step),
        args::Steps::On => Some(
            job.ok_or_else(|| bad_input("--steps on: not inside a Slurm job (no SLURM_JOB_ID)"))?,
        ),
    })
}

/// Entry point of `colloc run`: everything the user wrote checked, the slots and report
/// directory set up, the session opened in the event log, the engine's passes run, and
/// the report written.
///
/// # Errors
/// Bad input (exit 2) before anything starts; failures to set up (exit 1).
pub fn main(args: RunArgs, g: &crate::Global) -> anyhow::Result<ExitCode> {
    // Before any thread exists: the launcher is forked from this process.
    let launcher = LocalLauncher::start().context("cannot start the run launcher")?;
    let opts = args::Options::from(&args)?;
    let config = setup::config(g)?;
    let baseline = preflight(&args)?;
    let topo = across_nodes(&args, &opts, g)?;
    let signals = Signals::install().context("cannot install signal handlers")?;
    let mut gpus = match &topo {
        // Each node's prolog set its GPUs up; colloc only starts steps there.
        Some((_, t)) => setup::Gpus {
            layout: t.layout(),
            slots: t.slot_envs(),
            own_mps: None,
            nvml: None,
            nvml_note: None,
        },
        None => setup::gpus(&args, config.as_ref())?,
    };
    let mut specs = setup::specs(&args, gpus.layout.slots.len())?;
    let (fit, placed) = fit_runs(topo.as_ref().map(|(_, t)| t), &gpus, &specs)?;
    let ids = setup::identities(&specs);
    let restarted = setup::restart_count().is_some_and(|n| n > 0);
    let (dir, start, _lock) = setup::report_dir(&args, &ids, restarted)?;
    if let Some(note) = &gpus.nvml_note {
        log::warn!("{note}");
    }
    if topo.is_none() {
        gpus.start(config.as_ref())?;
    }
    let dir = std::sync::Arc::new(dir);
    dir.logs(false)
        .map_err(colloc_results::userfs::UserFsError::into_anyhow)?;
    let fold = match start {
        Start::Fresh => Fold::new(),
        Start::Resume(f) => *f,
    };
    let session = fold.sessions() + 1;
    let clock = Clock::start();
    let sampler = setup::sampler(&gpus, opts.interval, clock.t0);
    let mut rec = record::Recorder::open(std::sync::Arc::clone(&dir), session, clock, fold)
        .map_err(|e| {
            e.into_anyhow().context(format!(
                "cannot start the event log in {}",
                dir.path().display()
            ))
        })?;
    let ts = rec.now();
    let topology = topo.as_ref().map(|(_, t)| t);
    // The identities go into the record (a copy of them beside the manifest and the
    // record's own was the start's peak of a 100,000-run pack); made again from the
    // manifest where they are needed once more.
    rec.emit(session_event(
        ts, session, topology, &gpus, &fit, &opts, ids,
    ));
    if let Some(figs) = baseline {
        let ids = setup::identities(&specs);
        emit_baseline(&mut rec, figs, &ids, args.baseline.as_deref());
    }
    let job_id = std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|j| !j.trim().is_empty());
    let mut watch = match (&job_id, opts.warn.before) {
        (Some(j), Some(lead)) => timelimit::EndWatch::start(j, lead),
        _ => None,
    };
    // Across nodes each attempt is a Slurm step, started through the local supervisors.
    let step_ctx = topo.as_ref().map(|(_, t)| scheduler::StepCtx {
        book: Rc::new(RefCell::new(steps::StepBook::default())),
        slot_nodes: (0..t.slot_node.len())
            .map(|i| t.node_of(i).name.clone())
            .collect(),
    });
    let mut launcher = launcher_for(launcher, topo, step_ctx.as_ref(), &opts);
    // After the launcher's fork: the server is a thread.
    let live = job_id
        .as_deref()
        .and_then(|j| j.trim().parse().ok())
        .and_then(live::LiveServer::start)
        .map(|s| s.with_slot_devices(slot_uuids(&gpus)));
    let mut passes = Passes {
        launcher: &mut *launcher,
        signals: &signals,
        sampler: sampler.as_ref(),
        clock,
        opts: &opts,
        watch: watch.as_mut(),
        step_ctx,
        live: live.as_ref(),
    };
    let fit = (fit, placed);
    // Only the solo calibration needs the runs' identities again (a 100,000-run pack's
    // are tens of MB).
    let ids = if args.solo_baseline {
        setup::identities(&specs)
    } else {
        Vec::new()
    };
    let ran = passes.execute(args.solo_baseline, &mut specs, &ids, &mut rec, &gpus, fit);
    drop((ids, specs));
    if let Some(s) = sampler {
        let (totals, _) = s.finish();
        rec.emit(Event::Gpus {
            ts: rec.now(),
            session,
            gpus: totals,
        });
    }
    rec.emit(Event::SessionEnd {
        ts: rec.now(),
        session,
        stopped_by: ran.stopped_by,
        max_concurrent: ran.max_concurrent,
    });
    drop(gpus.own_mps);
    drop(launcher);
    Ok(finish(rec, &dir, &opts, ran.warned, job_id.as_deref()))
}

/// Everything the user wrote, checked before anything starts: something to run, the
/// manifest, every command's program, the `--baseline` report (its solo figures).
///
/// # Errors
/// Bad input.
fn preflight(args: &RunArgs) -> anyhow::Result<Option<Vec<(String, f64, String)>>> {
    if args.file.is_none() && args.command.is_empty() {
        return Err(bad_input(
            "nothing to run: give -f runs.toml or -- CMD [ARGS...]",
        ));
    }
    // The manifest first: its errors are the user's, whatever the GPUs say. Then every
    // program, as its start will find it.
    let here = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let colloc_path = std::env::var_os("PATH");
    if let Some(f) = &args.file {
        let specs = manifest::load(f).map_err(|e| bad_input(e.to_string()))?;
        let shown = f.display().to_string();
        programs::check(
            &specs,
            programs::Origin::Manifest(&shown),
            &here,
            colloc_path.as_deref(),
        )
        .map_err(bad_input)?;
    } else if args.command.first().is_some_and(|c| !c.trim().is_empty()) {
        let spec = manifest::RunSpec::plain(String::new(), args.command.clone());
        programs::check(
            &[spec],
            programs::Origin::CommandLine,
            &here,
            colloc_path.as_deref(),
        )
        .map_err(bad_input)?;
    }
    Ok(match &args.baseline {
        Some(p) => Some(setup::baseline(p).map_err(bad_input)?),
        None => None,
    })
}

/// In a Slurm job of several nodes (`--steps`): every node's slots, found by a step on
/// each, and the command that starts steps there.
///
/// # Errors
/// Bad input (`--steps on` outside a job, a layout the nodes cannot give); a node that
/// does not answer.
fn across_nodes(
    args: &RunArgs,
    opts: &args::Options,
    g: &crate::Global,
) -> anyhow::Result<Option<(nodes::StepCommand, nodes::Topology)>> {
    let Some(job_id) = steps_job(opts.steps)? else {
        return Ok(None);
    };
    let cmd = nodes::StepCommand::new(&job_id, g.config.clone())?;
    let reports = nodes::discover(&cmd)?;
    let topo = nodes::topology(
        reports,
        &nodes::Wanted {
            mode: args.mode.clone(),
            jobs: args.jobs.map(|j| j as usize),
        },
    )?;
    steps::raise_open_files(topo.slot_node.len());
    Ok(Some((cmd, topo)))
}

/// Right-sized slots: the slots' memory, and whether runs are placed by it (some run
/// declares `gpu_memory` and the slots' memory is known); what no slot can hold is
/// refused before anything starts.
///
/// # Errors
/// Bad input: a run that fits no slot.
fn fit_runs(
    topo: Option<&nodes::Topology>,
    gpus: &setup::Gpus,
    specs: &[manifest::RunSpec],
) -> anyhow::Result<(fit::Fit, bool)> {
    let memory = match topo {
        Some(t) => t.slot_memory_mib(),
        None => gpus
            .nvml
            .as_ref()
            .map(|(_, m)| m.slot_memory_mib.clone())
            .unwrap_or_default(),
    };
    let fit = fit::Fit::new(&gpus.layout.mode, &gpus.layout.slots, &memory);
    let declared = specs.iter().any(|s| s.gpu_memory.is_some());
    if declared {
        if fit.known() {
            let needs: Vec<(&str, Option<u64>)> = specs
                .iter()
                .map(|s| (s.name.as_str(), s.gpu_memory))
                .collect();
            fit.check(&needs).map_err(bad_input)?;
        } else {
            log::warn!(
                "gpu_memory is declared but the slots' memory is unknown (no NVML answer): \
                 runs are placed in manifest order, unchecked"
            );
        }
    }
    let placed = declared && fit.known();
    Ok((fit, placed))
}

/// The event that opens this session of the record: who, where, which slots, which runs.
fn session_event(
    ts: f64,
    session: u32,
    topo: Option<&nodes::Topology>,
    gpus: &setup::Gpus,
    fit: &fit::Fit,
    opts: &args::Options,
    ids: Vec<RunIdentity>,
) -> Event {
    Event::Session {
        ts,
        version: EVENTS_VERSION,
        session,
        colloc_version: env!("CARGO_PKG_VERSION").to_string(),
        host: scheduler::node_name().unwrap_or_default(),
        pid: std::process::id(),
        job_id: std::env::var("SLURM_JOB_ID").ok(),
        restart_count: setup::restart_count(),
        mode: match topo {
            Some(t) => t.mode_text(),
            None => gpus.layout.mode.to_string(),
        },
        source: match gpus.layout.source {
            slots::Source::Job => "job",
            slots::Source::Own => "own",
            slots::Source::Plain => "plain",
        }
        .into(),
        steps: topo.is_some(),
        slots: match topo {
            Some(t) => t
                .slot_records()
                .into_iter()
                .map(|s| SlotRecord {
                    memory_mib: fit.slot_mib(s.index),
                    ..s
                })
                .collect(),
            None => gpus
                .layout
                .slots
                .iter()
                .enumerate()
                .map(|(index, device)| SlotRecord {
                    index,
                    device: device.clone(),
                    node: None,
                    memory_mib: fit.slot_mib(index),
                })
                .collect(),
        },
        interval_s: opts.interval.as_secs_f64(),
        runs: ids,
    }
}

/// The solo figures of `--baseline` for this pack's runs, into the record.
fn emit_baseline(
    rec: &mut record::Recorder,
    figs: Vec<(String, f64, String)>,
    ids: &[RunIdentity],
    path: Option<&std::path::Path>,
) {
    let source = format!(
        "baseline {}",
        path.map_or(String::new(), |p| p.display().to_string())
    );
    let keys: Vec<String> = ids.iter().map(RunIdentity::solo_key).collect();
    for (key, throughput, unit) in figs {
        if keys.contains(&key) {
            rec.emit(Event::Solo {
                ts: rec.now(),
                key,
                run: String::new(),
                throughput,
                unit,
                source: source.clone(),
            });
        }
    }
}

/// What starts each attempt: the local launcher, or across nodes a Slurm step on the
/// slot's node through it (said once, unless `--quiet`).
fn launcher_for(
    local: LocalLauncher,
    topo: Option<(nodes::StepCommand, nodes::Topology)>,
    step_ctx: Option<&scheduler::StepCtx>,
    opts: &args::Options,
) -> Box<dyn Launcher> {
    let (Some((cmd, t)), Some(ctx)) = (topo, step_ctx) else {
        return Box::new(local);
    };
    if !opts.quiet {
        outln!(
            "colloc: {} slots on {} node(s) ({}); each run is a Slurm step on its slot's node",
            t.slot_node.len(),
            t.nodes.len(),
            t.nodes
                .iter()
                .map(|n| format!("{}: {}", n.name, n.layout.slots.len()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Box::new(steps::StepLauncher::new(
        local,
        cmd,
        &t,
        opts.interval,
        Rc::clone(&ctx.book),
    ))
}

/// Each slot's device as NVML names it: its MIG instance's UUID, else its GPU's.
fn slot_uuids(gpus: &setup::Gpus) -> Vec<Option<String>> {
    let Some((_, m)) = &gpus.nvml else {
        return Vec::new();
    };
    (0..m.slot_gpu.len())
        .map(|s| {
            if m.slot_mig.get(s).copied().unwrap_or(false) {
                m.slot_device.get(s).cloned().flatten()
            } else {
                m.slot_gpu
                    .get(s)
                    .copied()
                    .flatten()
                    .and_then(|g| m.gpus.get(g))
                    .map(|g| g.uuid.clone())
            }
        })
        .collect()
}

/// What both passes of the engine (the solo baseline, then the pack) run with.
struct Passes<'a> {
    launcher: &'a mut dyn Launcher,
    signals: &'a Signals,
    sampler: Option<&'a Sampler>,
    clock: Clock,
    opts: &'a args::Options,
    /// The job's end, where colloc watches it (`--warn-before`).
    watch: Option<&'a mut timelimit::EndWatch>,
    /// Across nodes: the steps' book and each slot's node.
    step_ctx: Option<scheduler::StepCtx>,
    /// Where the running runs are served to the node's metrics.
    live: Option<&'a live::LiveServer>,
}

impl Passes<'_> {
    /// `--solo-baseline` (`solo`): each distinct command alone on the first slot; then,
    /// unless that was stopped, the pack on every slot, placed by the slots' sizes (`fit`)
    /// where `placed`, a slot's next run started early where they allow (unless
    /// `--no-overlap`).
    /// How the last pass ended (the most attempts at once: the pack's).
    fn execute(
        &mut self,
        solo: bool,
        specs: &mut [manifest::RunSpec],
        ids: &[RunIdentity],
        rec: &mut record::Recorder,
        gpus: &setup::Gpus,
        (fit, placed): (fit::Fit, bool),
    ) -> Outcome {
        let devices = &gpus.layout.slots;
        let mut ran = Outcome::default();
        if solo {
            let mut cal = scheduler::Calibrate::new(
                &mut *specs,
                ids,
                rec,
                devices.clone(),
                self.sampler,
                self.opts,
                self.step_ctx.clone(),
            );
            let out = self.run(gpus.slots[..1].to_vec(), &mut cal);
            warn_solo_budget_spent(&cal, &out, self.opts);
            ran = Outcome {
                max_concurrent: 0,
                ..out
            };
        }
        if ran.stopped_by.is_none() {
            let mut pack = scheduler::Pack::new(
                specs,
                rec,
                devices.clone(),
                self.sampler,
                self.opts,
                self.step_ctx.clone(),
            )
            .with_live(self.live);
            if self.opts.overlap {
                pack = pack.with_overlap(fit.clone(), devices);
            }
            if placed {
                pack = pack.with_fit(fit);
            }
            ran = self.run(gpus.slots.clone(), &mut pack);
        }
        ran
    }

    /// One pass of the engine over `slots`, driven by `driver`.
    fn run(&mut self, slots: Vec<Slot>, driver: &mut dyn Driver) -> Outcome {
        let opts = EngineOptions {
            grace: self.opts.grace,
            tick: TICK,
            live_view: !self.opts.quiet,
        };
        let warn = Warn {
            signal: self.opts.warn.signal,
            grace: self.opts.warn.grace,
        };
        let deadline = self.watch.as_deref_mut().map(|w| w as &mut dyn Deadline);
        let mut engine = Engine::new(
            &mut *self.launcher,
            slots,
            self.sampler,
            self.signals,
            opts,
            self.clock,
        )
        .warning(warn, deadline);
        engine.run(driver)
    }
}

/// `--solo-baseline` ran out of `--solo-budget` before every distinct command was
/// measured alone: say which share has no solo figure.
fn warn_solo_budget_spent(cal: &scheduler::Calibrate, out: &Outcome, opts: &args::Options) {
    if cal.left() > 0 && out.stopped_by.is_none() {
        log::warn!(
            "--solo-baseline: the budget ({}) is spent; {} of {} distinct commands were not measured alone, so their runs have no solo figure (raise --solo-budget)",
            colloc_results::duration::show(opts.solo_budget),
            cal.left(),
            cal.total
        );
    }
}

/// Write the report and say where it is (or the one-line summary under `--quiet`); after
/// the time limit's warning, put the job back in the queue once the record is written.
/// Exit 0 only when every run succeeded and the report was written.
fn finish(
    rec: record::Recorder,
    dir: &colloc_results::record::store::ReportDir,
    opts: &args::Options,
    warned: bool,
    job_id: Option<&str>,
) -> ExitCode {
    let (report, error, charts) = rec.finish();
    accounting::tell(&report);
    let json = dir.shown(record::REPORT_JSON);
    if opts.quiet {
        outln!("{}", runs::one_line(&report, &json.display().to_string()));
    } else {
        out!("\n{}", runs::table(&report));
        let mut files = vec![
            json.display().to_string(),
            dir.shown(record::REPORT_CSV).display().to_string(),
        ];
        files.extend(charts.iter().map(|c| c.display().to_string()));
        if error.is_none() {
            outln!(
                "report: {}",
                colloc_results::text::escape(&files.join(", "))
            );
        }
    }
    if let Some(e) = &error {
        errln!(
            "colloc: error: {e}; the report files in {} are those of the last write that worked, and `colloc report {}` rebuilds them from the event log once there is room",
            dir.path().display(),
            dir.path().display()
        );
    }
    let left = report
        .runs
        .iter()
        .filter(|r| !r.removed && r.state != colloc_results::record::State::Succeeded)
        .count();
    let all_ok = left == 0;
    // The record is written: now the job may go back to the queue.
    if warned && error.is_none() {
        timelimit::requeue_after_warning(
            job_id,
            &opts.warn,
            left,
            &dir.path().display().to_string(),
        );
    } else if warned {
        log::warn!("not requeued: the record could not be written");
    }
    if all_ok && error.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
