//! `colloc run`: pack many runs onto the allocation's slots, keep a durable record of how
//! each did, and resume where an earlier pack stopped.
//!
//! - [`args`]: the flags, checked into options.
//! - [`manifest`]: `runs.toml` into run specs, every error caught before anything starts.
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
use crate::engine::pack::{Deadline, Engine, Options as EngineOptions, Warn};
use crate::engine::signals::Signals;
use crate::engine::Clock;
use crate::export::runs;
use crate::record::events::{Event, SlotRecord, EVENTS_VERSION};
use crate::record::fold::Fold;

pub mod args;
pub mod fit;
pub mod manifest;
pub mod memsize;
pub mod nodes;
pub mod record;
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

/// Entry point of `colloc run`.
///
/// # Errors
/// Bad input (exit 2) before anything starts; failures to set up (exit 1).
pub fn main(args: RunArgs, g: &crate::Global) -> anyhow::Result<ExitCode> {
    // Before any thread exists: the launcher is forked from this process.
    let launcher = LocalLauncher::start().context("cannot start the run launcher")?;
    let opts = args::Options::from(&args)?;
    let config = setup::config(g)?;
    // Everything the user wrote is checked before anything starts.
    if args.file.is_none() && args.command.is_empty() {
        return Err(bad_input(
            "nothing to run: give -f runs.toml or -- CMD [ARGS...]",
        ));
    }
    if let Some(f) = &args.file {
        // The manifest first: its errors are the user's, whatever the GPUs say.
        manifest::load(f).map_err(|e| bad_input(e.to_string()))?;
    }
    let baseline = match &args.baseline {
        Some(p) => Some(setup::baseline(p).map_err(bad_input)?),
        None => None,
    };
    let topo = match steps_job(opts.steps)? {
        Some(job_id) => {
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
            Some((cmd, topo))
        }
        None => None,
    };
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
    let specs = setup::specs(&args, gpus.layout.slots.len())?;
    // Right-sized slots: refuse what no slot can hold before anything starts.
    let fit = {
        let memory = match &topo {
            Some((_, t)) => t.slot_memory_mib(),
            None => gpus
                .nvml
                .as_ref()
                .map(|(_, m)| m.slot_memory_mib.clone())
                .unwrap_or_default(),
        };
        fit::Fit::new(&gpus.layout.mode, &gpus.layout.slots, &memory)
    };
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
        .map_err(crate::userfs::UserFsError::into_anyhow)?;
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
    rec.emit(Event::Session {
        ts: rec.now(),
        version: EVENTS_VERSION,
        session,
        colloc_version: env!("CARGO_PKG_VERSION").to_string(),
        host: scheduler::node_name().unwrap_or_default(),
        pid: std::process::id(),
        job_id: std::env::var("SLURM_JOB_ID").ok(),
        restart_count: setup::restart_count(),
        mode: match &topo {
            Some((_, t)) => t.mode_text(),
            None => gpus.layout.mode.to_string(),
        },
        source: match gpus.layout.source {
            slots::Source::Job => "job",
            slots::Source::Own => "own",
            slots::Source::Plain => "plain",
        }
        .into(),
        steps: topo.is_some(),
        slots: match &topo {
            Some((_, t)) => t
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
        runs: ids.clone(),
    });
    if let Some(figs) = baseline {
        let source = format!(
            "baseline {}",
            args.baseline
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        );
        let keys: Vec<String> = ids.iter().map(|i| i.solo_key()).collect();
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
    let devices = gpus.layout.slots.clone();
    let engine_opts = EngineOptions {
        grace: opts.grace,
        tick: TICK,
        live_view: !opts.quiet,
    };
    let mut stopped_by = None;
    let mut max_concurrent = 0;
    let mut warned = false;
    let job_id = std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|j| !j.trim().is_empty());
    let warn = Warn {
        signal: opts.warn.signal,
        grace: opts.warn.grace,
    };
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
    let mut launcher: Box<dyn Launcher> = match (topo, &step_ctx) {
        (Some((cmd, t)), Some(ctx)) => {
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
                launcher,
                cmd,
                &t,
                opts.interval,
                Rc::clone(&ctx.book),
            ))
        }
        _ => Box::new(launcher),
    };
    if args.solo_baseline {
        let mut cal = scheduler::Calibrate::new(
            &specs,
            &ids,
            &mut rec,
            devices.clone(),
            sampler.as_ref(),
            &opts,
            step_ctx.clone(),
        );
        let mut engine = Engine::new(
            &mut *launcher,
            gpus.slots[..1].to_vec(),
            sampler.as_ref(),
            &signals,
            engine_opts.clone(),
            clock,
        )
        .warning(warn, watch.as_mut().map(|w| w as &mut dyn Deadline));
        let out = engine.run(&mut cal);
        warned = out.warned;
        if cal.left() > 0 && out.stopped_by.is_none() {
            log::warn!(
                "--solo-baseline: the budget ({}) is spent; {} of {} distinct commands were not measured alone, so their runs have no solo figure (raise --solo-budget)",
                crate::engine::duration::show(opts.solo_budget),
                cal.left(),
                cal.total
            );
        }
        stopped_by = out.stopped_by;
    }
    if stopped_by.is_none() {
        let mut pack = scheduler::Pack::new(
            &specs,
            &mut rec,
            devices,
            sampler.as_ref(),
            &opts,
            step_ctx.clone(),
        );
        if declared && fit.known() {
            pack = pack.with_fit(fit.clone());
        }
        let mut engine = Engine::new(
            &mut *launcher,
            gpus.slots.clone(),
            sampler.as_ref(),
            &signals,
            engine_opts,
            clock,
        )
        .warning(warn, watch.as_mut().map(|w| w as &mut dyn Deadline));
        let out = engine.run(&mut pack);
        warned = out.warned;
        stopped_by = out.stopped_by;
        max_concurrent = out.max_concurrent;
    }
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
        stopped_by,
        max_concurrent,
    });
    drop(gpus.own_mps);
    drop(launcher);
    let (report, error, charts) = rec.finish();
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
            outln!("report: {}", crate::engine::text::escape(&files.join(", ")));
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
        .filter(|r| r.state != crate::engine::State::Succeeded)
        .count();
    let all_ok = left == 0;
    // The record is written: now the job may go back to the queue.
    if warned && error.is_none() {
        timelimit::requeue_after_warning(
            job_id.as_deref(),
            &opts.warn,
            left,
            &dir.path().display().to_string(),
        );
    } else if warned {
        log::warn!("not requeued: the record could not be written");
    }
    Ok(if all_ok && error.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
