//! The pack engine: jobs on slots, one per slot at a time (two for a moment where the
//! driver starts a slot's next run early, [`Driver::start_early`]), in one event loop over
//! every running attempt's output and supervisor, colloc's signals, timeouts and grace
//! periods. What to run next and what an end means is the caller's ([`Driver`]): `colloc
//! run` hands out its manifest's runs and retries, `colloc bench` N copies of one command
//! and stops them when its measurement window is complete.
//!
//! An attempt ends when its supervisor reports that nothing of it is left (so its slot's
//! GPU is free for the next) and its output is read to the end.
//!
//! What the engine and its caller exchange is in [`driver`]; reading an attempt's output
//! (log, scanner, live view) in [`output`].

use std::collections::BTreeMap;
use std::fs::File;
use std::time::{Duration, Instant};

use colloc_results::telemetry::Sampler;
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::launch::{Cmd, Launcher, Msg};
use super::signals::{Signals, FORWARD};
use super::{signal_name, Clock};
use colloc_results::record::State;

mod driver;
mod output;

pub use driver::{
    AttemptId, Deadline, Driver, Ended, Exit, Job, LogFile, MetricAcc, Options, Seen, Slot, View,
    Warn,
};
use output::{line, note_in_log, read_output, tell_rate};

/// Carriage-return progress lines (tqdm) reach the live view at most this often.
const CR_LINE_EVERY: Duration = Duration::from_secs(2);
/// How long the output may stay open after the supervisor is done (an unkillable process
/// may hold it) before colloc stops reading it.
const DRAIN_WAIT: Duration = Duration::from_secs(1);
/// How long an attempt killed by a signal colloc did not send ([`TEARDOWN_SIGNALS`]) waits
/// before it counts as failed. Slurm signals every process of a job at once (scancel,
/// requeue, time limit, node shutdown), so a run may die of it just before colloc's own
/// copy arrives; if colloc is told to stop within this time, the attempt was interrupted
/// (and a resumed pack runs it again), not failed.
const TEARDOWN_WAIT: Duration = Duration::from_secs(1);
/// Signals with which Slurm (or a person) tears a whole job down.
const TEARDOWN_SIGNALS: [i32; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGKILL];
/// Longest line kept whole; longer ones are cut.
const MAX_LINE: usize = 64 * 1024;

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

struct Running {
    job: Job,
    slot: usize,
    /// The launcher's lane it runs in: its slot, or (started early beside the slot's
    /// running attempt) the slot's second lane, `slot + slots`.
    lane: usize,
    start: f64,
    out: Option<File>,
    /// Its supervisor still reports on it (until `done`).
    sup_open: bool,
    pending: Vec<u8>,
    last_cr: Option<Instant>,
    log: Option<File>,
    log_error: Option<String>,
    seen: Seen,
    pid: Option<u32>,
    exit: Option<Exit>,
    done_at: Option<Instant>,
    left: u32,
    escaped: Vec<(u32, String)>,
    deadline: Option<Instant>,
    /// The deadline is the end of a measuring window the driver set, not a time limit.
    window_end: bool,
    term_at: Option<Instant>,
    /// When it got the time-limit warning.
    warned_at: Option<Instant>,
    killed: bool,
    timed_out: bool,
    interrupted: bool,
    /// When its launcher was last told its throughput, and how many samples it had.
    rate_told: Option<(Instant, u64)>,
}

/// What the driver may do during a call.
pub struct Ctl<'e> {
    running: &'e mut BTreeMap<AttemptId, Running>,
    stop: &'e mut Option<String>,
    launcher: &'e mut dyn Launcher,
    clock: Clock,
}

impl Ctl<'_> {
    /// The running attempts.
    pub fn running(&self) -> impl Iterator<Item = View<'_>> {
        self.running.iter().map(|(id, r)| View {
            id: *id,
            job: &r.job,
            slot: r.slot,
            start: r.start,
            seen: &r.seen,
        })
    }

    /// The output facts of a running attempt, to take fresh samples from.
    pub fn seen_mut(&mut self, id: AttemptId) -> Option<&mut Seen> {
        self.running.get_mut(&id).map(|r| &mut r.seen)
    }

    /// Seconds on the engine's clock.
    pub fn now(&self) -> f64 {
        self.clock.now()
    }

    /// End a running attempt `after` from now (SIGTERM, then SIGKILL after the grace
    /// period), as the planned end of a measuring window rather than a time-out: its
    /// state is the driver's to decide. Does nothing to an attempt already stopping.
    pub fn end_after(&mut self, id: AttemptId, after: Duration) {
        if let Some(r) = self.running.get_mut(&id).filter(|r| r.term_at.is_none()) {
            r.deadline = Some(Instant::now() + after);
            r.window_end = true;
        }
    }

    /// Is the engine stopping?
    pub fn stopping(&self) -> bool {
        self.stop.is_some()
    }

    /// Stop everything: send `sig` to every running attempt (SIGKILL after the grace
    /// period) and start nothing more.
    pub fn stop_all(&mut self, reason: &str, sig: i32) {
        begin_stop(self.running, self.stop, self.launcher, reason, sig);
    }
}

fn begin_stop(
    running: &mut BTreeMap<AttemptId, Running>,
    stop: &mut Option<String>,
    launcher: &mut dyn Launcher,
    reason: &str,
    sig: i32,
) -> bool {
    if stop.is_some() {
        return false;
    }
    if !running.is_empty() {
        log::info!("{reason}: stopping {} running run(s)", running.len());
    }
    let now = Instant::now();
    for (id, r) in running.iter_mut() {
        r.interrupted = true;
        r.term_at.get_or_insert(now);
        if r.sup_open {
            launcher.send(r.lane, *id, Cmd::Signal(sig));
        }
    }
    *stop = Some(reason.to_string());
    true
}

/// How a pack ended.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Why it stopped early, if it did.
    pub stopped_by: Option<String>,
    /// Most attempts that ran at once.
    pub max_concurrent: usize,
    /// It stopped for the job's time limit ([`Warn`]).
    pub warned: bool,
}

/// The pack engine.
pub struct Engine<'a> {
    launcher: &'a mut dyn Launcher,
    slots: Vec<Slot>,
    sampler: Option<&'a Sampler>,
    signals: &'a Signals,
    opts: Options,
    clock: Clock,
    warn: Option<Warn>,
    deadline: Option<&'a mut dyn Deadline>,
    warned: bool,
}

impl<'a> Engine<'a> {
    /// An engine over `slots`.
    pub fn new(
        launcher: &'a mut dyn Launcher,
        slots: Vec<Slot>,
        sampler: Option<&'a Sampler>,
        signals: &'a Signals,
        opts: Options,
        clock: Clock,
    ) -> Engine<'a> {
        Engine {
            launcher,
            slots,
            sampler,
            signals,
            opts,
            clock,
            warn: None,
            deadline: None,
            warned: false,
        }
    }

    /// Stop for the job's time limit as `warn` says when colloc receives SIGUSR1 or
    /// `deadline` (if any) is reached; without this SIGUSR1 is only forwarded.
    pub fn warning(mut self, warn: Warn, deadline: Option<&'a mut dyn Deadline>) -> Engine<'a> {
        self.warn = Some(warn);
        self.deadline = deadline;
        self
    }

    /// Run jobs until the driver has none left and every attempt has ended, or until
    /// stopped and every attempt has ended.
    pub fn run(&mut self, driver: &mut dyn Driver) -> Outcome {
        let mut running: BTreeMap<AttemptId, Running> = BTreeMap::new();
        let mut stop: Option<String> = None;
        let mut max_concurrent = 0;
        let mut next_tick = Instant::now() + self.opts.tick;
        loop {
            // A signal that came before (while colloc set up) counts before anything starts.
            self.handle_signals(driver, &mut running, &mut stop);
            if stop.is_none() {
                self.start_jobs(driver, &mut running);
                max_concurrent = max_concurrent.max(running.len());
            }
            if running.is_empty() {
                break;
            }
            let (outputs, slots) = self.wait(&running, next_tick);
            self.handle_signals(driver, &mut running, &mut stop);
            if stop.is_some() {
                // Stopping already: the job's end no longer matters (nor is Slurm asked).
                self.deadline = None;
            } else {
                let due = self.deadline.as_mut().and_then(|d| d.warn_at());
                if due.is_some_and(|t| Instant::now() >= t) {
                    self.begin_warning(
                        driver,
                        &mut running,
                        &mut stop,
                        "the job's time limit is near",
                    );
                }
            }
            for id in outputs {
                if let Some(r) = running.get_mut(&id) {
                    read_output(r, self.opts.live_view, &self.clock);
                    tell_rate(&mut *self.launcher, id, r);
                }
            }
            for lane in slots {
                self.read_control(lane, &mut running);
            }
            self.launcher.tick();
            let now = Instant::now();
            for (id, r) in running.iter_mut() {
                self.timers(*id, r, now);
            }
            let ended: Vec<AttemptId> = running
                .iter()
                .filter(|(_, r)| is_over(r, now))
                .map(|(id, _)| *id)
                .collect();
            for id in ended {
                if let Some(r) = running.remove(&id) {
                    let e = self.finish(id, r);
                    let mut ctl = Ctl {
                        running: &mut running,
                        stop: &mut stop,
                        launcher: &mut *self.launcher,
                        clock: self.clock,
                    };
                    driver.ended(e, &mut ctl);
                }
            }
            if Instant::now() >= next_tick {
                next_tick = Instant::now() + self.opts.tick;
                let mut ctl = Ctl {
                    running: &mut running,
                    stop: &mut stop,
                    launcher: &mut *self.launcher,
                    clock: self.clock,
                };
                let was = ctl.stopping();
                driver.tick(&mut ctl);
                if !was {
                    if let Some(reason) = stop.clone() {
                        driver.stopping(&reason);
                    }
                }
            }
        }
        Outcome {
            stopped_by: stop,
            max_concurrent,
            warned: self.warned,
        }
    }

    fn free_slots(&self, running: &BTreeMap<AttemptId, Running>) -> Vec<usize> {
        let mut busy = vec![false; self.slots.len()];
        for r in running.values() {
            busy[r.slot] = true;
        }
        (0..self.slots.len()).filter(|&s| !busy[s]).collect()
    }

    fn start_jobs(&mut self, driver: &mut dyn Driver, running: &mut BTreeMap<AttemptId, Running>) {
        let mut free = self.free_slots(running);
        free.sort_by_key(|&s| driver.slot_rank(s));
        let mut starts: Vec<(usize, usize)> = free.into_iter().map(|s| (s, s)).collect();
        starts.extend(self.early_slots(driver, running));
        for (slot, lane) in starts {
            // A driver may keep a slot idle (its node is out of service) while others
            // take work.
            let Some(job) = driver.next_job(slot) else {
                continue;
            };
            let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let r = self.launch(id, job, slot, lane);
            let v = View {
                id,
                job: &r.job,
                slot,
                start: r.start,
                seen: &r.seen,
            };
            driver.started(&v);
            running.insert(id, r);
        }
    }

    /// Slots whose one running attempt the driver wants followed now, before it ends
    /// ([`Driver::start_early`]), each with the lane its next attempt takes: where the
    /// launcher has a second lane per slot, and the attempt is not being stopped.
    fn early_slots(
        &self,
        driver: &mut dyn Driver,
        running: &BTreeMap<AttemptId, Running>,
    ) -> Vec<(usize, usize)> {
        let n = self.slots.len();
        if self.launcher.lanes_per_slot() < 2 {
            return Vec::new();
        }
        let mut count = vec![0usize; n];
        for r in running.values() {
            count[r.slot] += 1;
        }
        let now = self.clock.now();
        let mut out = Vec::new();
        for (id, r) in running {
            let going = r.exit.is_none()
                && r.sup_open
                && r.term_at.is_none()
                && r.warned_at.is_none()
                && r.deadline.is_none_or(|d| d > Instant::now());
            if count[r.slot] != 1 || !going {
                continue;
            }
            let v = View {
                id: *id,
                job: &r.job,
                slot: r.slot,
                start: r.start,
                seen: &r.seen,
            };
            if driver.start_early(&v, now) {
                let lane = if r.lane == r.slot { r.slot + n } else { r.slot };
                out.push((r.slot, lane));
            }
        }
        out
    }

    fn launch(&mut self, id: AttemptId, job: Job, slot: usize, lane: usize) -> Running {
        let start = self.clock.now();
        let mut spec = job.spec.clone();
        let mut env = self.slots[slot].env.clone();
        env.append(&mut spec.env);
        spec.env = env;
        let (log, log_error) = match job.log.create() {
            Ok(f) => (Some(f), None),
            Err(e) => {
                let msg = format!("cannot write its log: {e}");
                log::warn!("{}: {msg}", job.label);
                (None, Some(msg))
            }
        };
        let mut r = Running {
            deadline: job.timeout.map(|t| Instant::now() + t),
            window_end: false,
            job,
            slot,
            lane,
            start,
            out: None,
            sup_open: false,
            pending: Vec::new(),
            last_cr: None,
            log,
            log_error,
            seen: Seen::default(),
            pid: None,
            exit: None,
            done_at: None,
            left: 0,
            escaped: Vec::new(),
            term_at: None,
            warned_at: None,
            killed: false,
            timed_out: false,
            interrupted: false,
            rate_told: None,
        };
        r.seen.metrics = vec![MetricAcc::default(); r.job.scanner.metrics.len()];
        if let Some(s) = self.sampler {
            s.begin(id, slot);
        }
        match self.launcher.launch(lane, id, &spec) {
            Ok(out) => {
                r.out = Some(File::from(out));
                r.sup_open = true;
            }
            Err(e) => {
                let msg = format!("cannot start: {e}");
                note_in_log(&mut r, &msg);
                r.exit = Some(Exit::NotStarted(msg));
                r.done_at = Some(Instant::now());
            }
        }
        log::debug!("started {} on slot {slot}", r.job.label);
        r
    }

    /// Wait for input or the next deadline; the attempts whose output and the slots whose
    /// supervisor have something to read.
    fn wait(
        &mut self,
        running: &BTreeMap<AttemptId, Running>,
        next_tick: Instant,
    ) -> (Vec<AttemptId>, Vec<usize>) {
        let now = Instant::now();
        let mut wake = next_tick;
        if let Some(t) = self.deadline.as_mut().and_then(|d| d.warn_at()) {
            wake = wake.min(t);
        }
        for r in running.values() {
            if let (Some(t), Some(w)) = (r.warned_at.filter(|_| r.term_at.is_none()), self.warn) {
                wake = wake.min(t + w.grace);
            }
            if let Some(d) = r.deadline.filter(|_| r.term_at.is_none()) {
                wake = wake.min(d);
            }
            if let Some(t) = r.term_at.filter(|_| !r.killed) {
                wake = wake.min(t + self.opts.grace);
            }
            if let Some(t) = over_at(r) {
                wake = wake.min(t);
            }
        }
        let sig_fds = self.signals.fds();
        let sup_fds = self.launcher.fds();
        let mut fds: Vec<PollFd<'_>> = sig_fds
            .iter()
            .map(|f| PollFd::new(f, PollFlags::IN))
            .collect();
        let n_sig = fds.len();
        fds.extend(
            sup_fds
                .iter()
                .map(|(_, f)| PollFd::from_borrowed_fd(*f, PollFlags::IN)),
        );
        let n_sup = fds.len();
        let mut out_ids = Vec::new();
        for (id, r) in running {
            if let Some(o) = &r.out {
                fds.push(PollFd::new(o, PollFlags::IN));
                out_ids.push(*id);
            }
        }
        let d = wake.saturating_duration_since(now);
        let ts = Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        };
        if let Err(e) = poll(&mut fds, Some(&ts)) {
            if e != rustix::io::Errno::INTR {
                log::debug!("poll: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let ready = |f: &PollFd<'_>| !f.revents().is_empty();
        let slots = sup_fds
            .iter()
            .zip(&fds[n_sig..n_sup])
            .filter(|(_, f)| ready(f))
            .map(|((slot, _), _)| *slot)
            .collect();
        let outputs = out_ids
            .into_iter()
            .zip(&fds[n_sup..])
            .filter(|(_, f)| ready(f))
            .map(|(id, _)| id)
            .collect();
        (outputs, slots)
    }

    fn handle_signals(
        &mut self,
        driver: &mut dyn Driver,
        running: &mut BTreeMap<AttemptId, Running>,
        stop: &mut Option<String>,
    ) {
        let mut got = self.signals.take();
        if let Some(parent) = self.signals.parent_gone() {
            if stop.is_none() {
                let reason = format!(
                    "colloc's parent process (pid {parent}: the batch shell or the job step) is gone"
                );
                log::warn!("{reason}: stopping {} running run(s)", running.len());
                begin_stop(running, stop, &mut *self.launcher, &reason, libc::SIGTERM);
                driver.stopping(&reason);
            }
            // A signal that came with it (Slurm ending the job) must not kill the runs
            // at once: they get their grace.
            got.retain(|s| !super::signals::STOP.contains(s));
        }
        for sig in got {
            let name = signal_name(sig);
            let targets: Vec<(usize, u32)> = running
                .values()
                .map(|r| (r.job.run, r.job.attempt))
                .collect();
            if sig == libc::SIGUSR1 && self.warn.is_some() {
                if stop.is_some() {
                    log::warn!("colloc received {name} while stopping; ignored");
                } else {
                    let reason = format!("colloc received {name} (the job's time limit is near)");
                    self.begin_warning(driver, running, stop, &reason);
                }
                continue;
            }
            if FORWARD.contains(&sig) {
                log::warn!(
                    "colloc received {name}: forwarding it to {} running run(s)",
                    running.len()
                );
                for (id, r) in running.iter() {
                    if r.sup_open {
                        self.launcher.send(r.lane, *id, Cmd::Signal(sig));
                    }
                }
                driver.signal(sig, &targets);
                continue;
            }
            if stop.is_some() {
                log::warn!("{name} again: killing all runs now");
                for (id, r) in running.iter_mut() {
                    if r.sup_open {
                        self.launcher.send(r.lane, *id, Cmd::Kill);
                    }
                    r.killed = true;
                }
                driver.signal(sig, &targets);
                continue;
            }
            // SIGHUP (a lost terminal) is forwarded as SIGTERM.
            let fwd = if sig == libc::SIGHUP {
                libc::SIGTERM
            } else {
                sig
            };
            let reason = format!("colloc received {name}");
            log::warn!("{reason}: stopping {} running run(s)", running.len());
            begin_stop(running, stop, &mut *self.launcher, &reason, fwd);
            driver.signal(sig, &targets);
            driver.stopping(&reason);
        }
    }

    /// Warn every running attempt ([`Warn`]) and start nothing more.
    fn begin_warning(
        &mut self,
        driver: &mut dyn Driver,
        running: &mut BTreeMap<AttemptId, Running>,
        stop: &mut Option<String>,
        reason: &str,
    ) {
        let Some(w) = self.warn else { return };
        if stop.is_some() {
            return;
        }
        log::warn!(
            "{reason}: sending {} to {} running run(s); they have {} to save a checkpoint and exit, and are run again when the pack resumes",
            signal_name(w.signal),
            running.len(),
            colloc_results::duration::show(w.grace)
        );
        let now = Instant::now();
        let mut targets = Vec::new();
        for (id, r) in running.iter_mut() {
            r.interrupted = true;
            r.warned_at = Some(now);
            targets.push((r.job.run, r.job.attempt));
            if r.sup_open {
                self.launcher.send(r.lane, *id, Cmd::Signal(w.signal));
            }
        }
        *stop = Some(reason.to_string());
        self.warned = true;
        driver.signal(w.signal, &targets);
        driver.stopping(reason);
    }

    fn read_control(&mut self, lane: usize, running: &mut BTreeMap<AttemptId, Running>) {
        let (msgs, gone) = self.launcher.read(lane);
        for (id, m) in msgs {
            let Some(r) = running.get_mut(&id) else {
                continue;
            };
            match m {
                Msg::Pid(p) => {
                    r.pid = Some(p);
                    if let Some(s) = self.sampler {
                        // The run's processes are its session.
                        s.session(id, p);
                    }
                    // A signal sent before the pid was known reached the run anyway: the
                    // supervisor takes requests in order, the start first.
                }
                Msg::Error(e) => {
                    note_in_log(r, &e);
                    r.exit = Some(Exit::NotStarted(e));
                }
                Msg::Exit(c) => r.exit = Some(Exit::Code(c)),
                Msg::Signaled(s) => r.exit = Some(Exit::Signal(s)),
                Msg::Escaped { pid, comm } => {
                    log::warn!(
                        "{}: process {pid} ({comm}) had left the run's session (setsid); it was killed",
                        r.job.label
                    );
                    r.escaped.push((pid, comm));
                }
                Msg::Done { left } => {
                    r.left = left;
                    r.sup_open = false;
                    r.done_at.get_or_insert(Instant::now());
                    if left > 0 {
                        log::warn!(
                            "{}: {left} process(es) of the run would not exit after SIGKILL",
                            r.job.label
                        );
                    }
                }
            }
        }
        if gone {
            for r in running
                .values_mut()
                .filter(|r| r.lane == lane && r.sup_open)
            {
                r.sup_open = false;
                // The supervisor vanished: kill what may be left of the group.
                if let Some(p) = r.pid {
                    super::sys::kill_group(p, libc::SIGKILL);
                }
                log::warn!("{}: its supervisor ended unexpectedly", r.job.label);
                r.done_at.get_or_insert(Instant::now());
                if r.exit.is_none() {
                    r.exit = Some(Exit::Lost);
                }
            }
        }
    }

    fn timers(&mut self, id: AttemptId, r: &mut Running, now: Instant) {
        if r.exit.is_some() || !r.sup_open {
            return;
        }
        if r.term_at.is_none() && r.deadline.is_some_and(|d| now >= d) {
            if r.window_end {
                log::info!("{}: its window is over; sending SIGTERM", r.job.label);
            } else {
                log::warn!("{}: timed out; sending SIGTERM", r.job.label);
            }
            r.timed_out = true;
            r.term_at = Some(now);
            self.launcher.send(r.lane, id, Cmd::Signal(libc::SIGTERM));
        }
        if let (Some(t), Some(w)) = (r.warned_at, self.warn) {
            if r.term_at.is_none() && now >= t + w.grace {
                log::warn!(
                    "{}: still running {} after {}; sending SIGTERM",
                    r.job.label,
                    colloc_results::duration::show(w.grace),
                    signal_name(w.signal)
                );
                r.term_at = Some(now);
                self.launcher.send(r.lane, id, Cmd::Signal(libc::SIGTERM));
            }
        }
        if !r.killed && r.term_at.is_some_and(|t| now >= t + self.opts.grace) {
            log::warn!(
                "{}: still running {} after SIGTERM; killing it",
                r.job.label,
                colloc_results::duration::show(self.opts.grace)
            );
            self.launcher.send(r.lane, id, Cmd::Kill);
            r.killed = true;
        }
    }

    fn finish(&mut self, id: AttemptId, mut r: Running) -> Ended {
        if let Some(rest) = (!r.pending.is_empty()).then(|| std::mem::take(&mut r.pending)) {
            line(&mut r, &rest, false, self.opts.live_view, &self.clock);
        }
        if r.out.is_some() {
            log::warn!(
                "{}: its output is still held open by a process colloc could not end; no longer reading it",
                r.job.label
            );
        }
        // It ended when its supervisor said so, not after draining its output or the
        // teardown hold.
        let end = match r.done_at {
            Some(d) => d.saturating_duration_since(self.clock.t0).as_secs_f64(),
            None => self.clock.now(),
        };
        let exit = r.exit.clone().unwrap_or(Exit::Lost);
        let state = match &exit {
            Exit::NotStarted(_) => State::Failed,
            _ if r.timed_out => State::TimedOut,
            _ if r.interrupted => State::Interrupted,
            Exit::Code(0) => State::Succeeded,
            _ => State::Failed,
        };
        let gpu = self.sampler.and_then(|s| s.end(id));
        Ended {
            id,
            end,
            exit,
            state,
            pid: r.pid,
            seen: r.seen,
            escaped: r.escaped,
            left: r.left,
            gpu,
            log_error: r.log_error,
            job: r.job,
        }
    }
}

fn is_over(r: &Running, now: Instant) -> bool {
    over_at(r).is_some_and(|t| now >= t)
}

/// When a finished attempt counts as over: once its supervisor is done, its output read to
/// the end (or [`DRAIN_WAIT`] later) and, if it is [`held_for_teardown`], [`TEARDOWN_WAIT`]
/// later.
fn over_at(r: &Running) -> Option<Instant> {
    let done = r.done_at.filter(|_| !r.sup_open)?;
    let drained = if r.out.is_none() {
        done
    } else {
        done + DRAIN_WAIT
    };
    Some(if held_for_teardown(r) {
        drained.max(done + TEARDOWN_WAIT)
    } else {
        drained
    })
}

/// Did the attempt die of a job-teardown signal that colloc neither sent nor was told of
/// (yet)? Then it waits [`TEARDOWN_WAIT`] for colloc's own signal before it counts as
/// failed.
fn held_for_teardown(r: &Running) -> bool {
    matches!(r.exit, Some(Exit::Signal(s)) if TEARDOWN_SIGNALS.contains(&s))
        && r.term_at.is_none()
        && !r.interrupted
}
