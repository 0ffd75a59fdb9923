//! `colloc step run`: the node side of one run that `colloc run` started as a Slurm step
//! of its own (`srun --overlap -N1 -n1 -w NODE --job-name=RUN colloc step run`).
//!
//! It is a slot supervisor as on one node ([`crate::engine::launch`]): the run starts in
//! its own session under a subreaper, with the step's stdout (forwarded by Slurm to
//! colloc) as its stdout and stderr; signals colloc asks for go to its process group;
//! when its leader exits, everything left of it is killed. Besides, it samples the run's
//! GPU through NVML on this node and reports the figures. See [`super::protocol`] for
//! what travels where.
//!
//! It ignores the signals Slurm sends a whole step (the run gets them itself) so that it
//! can report how the run ended; end of file on its stdin (colloc or its srun gone) kills
//! the run.

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use colloc_core::nvml::NvmlGpus;
use colloc_results::telemetry::{self, NvmlProbe, Probe, Sampler, SamplerConfig, Tick, Want};
use rustix::event::{poll, PollFd, PollFlags};

use super::protocol::{Control, EnergyReading, StepGpu, StepMsg, StepSpec, MAX_LINE};
use crate::engine::launch::{Cmd, Launcher, LocalLauncher, Msg};
use crate::engine::sys;

/// The attempt id on the step's own supervisor (one run per step).
const ID: u64 = 1;
/// Most energy readings kept for one run; beyond, every other one is dropped.
const MAX_READINGS: usize = 4096;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Write one report line to stderr (whole, under the lock other writers take too).
fn say(m: &StepMsg) {
    let _ = io::stderr().lock().write_all(m.line().as_bytes());
}

/// Lines from a descriptor, read as they come.
struct Lines {
    buf: Vec<u8>,
    eof: bool,
}

impl Lines {
    /// Read what is there (blocking reads until one line is whole when `block`).
    fn fill(&mut self, fd: BorrowedFd<'_>, block: bool) {
        let mut chunk = [0u8; 8192];
        loop {
            if self.eof || (!block && self.buf.contains(&b'\n')) {
                return;
            }
            match rustix::io::read(fd, &mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if block && self.buf.contains(&b'\n') {
                        return;
                    }
                    if self.buf.len() > MAX_LINE {
                        self.eof = true;
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    fn next(&mut self) -> Option<String> {
        let i = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=i).collect();
        Some(String::from_utf8_lossy(&line[..i]).into_owned())
    }
}

/// The NVML probe, keeping every energy reading of the run's GPU with its Unix time.
struct Recording {
    inner: NvmlProbe,
    out: Arc<Mutex<Vec<EnergyReading>>>,
}

impl Probe for Recording {
    fn read(&mut self, want: &Want) -> Tick {
        let t = self.inner.read(want);
        if let Some(g) = t.gpus.first() {
            if let Some(e) = g.energy_mj {
                let mut v = self.out.lock().unwrap_or_else(|p| p.into_inner());
                v.push((unix_now(), e, g.util, g.used_bytes));
                if v.len() > MAX_READINGS {
                    let last = v.pop();
                    let mut i = 0;
                    v.retain(|_| {
                        i += 1;
                        i % 2 == 1
                    });
                    v.extend(last);
                }
            }
        }
        t
    }
}

/// The run's GPU sampler, where NVML answers on this node.
struct Gpu {
    sampler: Sampler,
    id: telemetry::GpuId,
    readings: Arc<Mutex<Vec<EnergyReading>>>,
}

impl Gpu {
    /// Stop sampling: the run's GPU figures and energy readings.
    fn finish(self) -> StepMsg {
        let mut figures = self.sampler.end(ID).unwrap_or_default();
        // Shared out by colloc run, which sees every run on the GPU.
        figures.energy_j = None;
        drop(self.sampler.finish());
        let readings =
            std::mem::take(&mut *self.readings.lock().unwrap_or_else(|p| p.into_inner()));
        StepMsg::Gpu(Box::new(StepGpu {
            gpu: self.id,
            figures,
            readings,
        }))
    }
}

fn start_sampler(spec: &StepSpec, nvml_library: &str, base: Instant) -> Option<Gpu> {
    let dev = spec.device.clone()?;
    let nvml = match NvmlGpus::open(nvml_library) {
        Ok(n) => Arc::new(n),
        Err(e) => {
            log::warn!("NVML unavailable on this node ({e}); no GPU figures for this run");
            return None;
        }
    };
    let map = telemetry::resolve(nvml.nvml(), &[Some(dev)]);
    let id = map.gpus.first()?.clone();
    let readings = Arc::new(Mutex::new(Vec::new()));
    let probe = Recording {
        inner: NvmlProbe::new(Arc::clone(&nvml), &map),
        out: Arc::clone(&readings),
    };
    let sampler = Sampler::start(
        Box::new(probe),
        map,
        SamplerConfig::new(
            Duration::from_secs_f64(spec.interval_s.max(0.05)),
            spec.mode.starts_with("mps"),
            base,
        ),
    );
    sampler.begin(ID, 0);
    Some(Gpu {
        sampler,
        id,
        readings,
    })
}

/// The first line to colloc: this node, the Slurm step, the supervisor's pid.
fn hello() -> StepMsg {
    StepMsg::Hello {
        node: colloc_core::publish::node_name().unwrap_or_default(),
        step: match (
            std::env::var("SLURM_JOB_ID"),
            std::env::var("SLURM_STEP_ID"),
        ) {
            (Ok(j), Ok(s)) => Some(format!("{j}.{s}")),
            _ => None,
        },
        pid: std::process::id(),
    }
}

/// Wait until the supervisor's descriptors `sup` or `stdin` (while colloc is there) can
/// be read, or `within` has passed: (a supervisor is ready, stdin is).
fn wait_ready(
    sup: &[(usize, BorrowedFd<'_>)],
    stdin: Option<BorrowedFd<'_>>,
    within: Option<Duration>,
) -> (bool, bool) {
    let mut fds: Vec<PollFd<'_>> = sup
        .iter()
        .map(|(_, f)| PollFd::from_borrowed_fd(*f, PollFlags::IN))
        .collect();
    let n_sup = fds.len();
    if let Some(fd) = stdin {
        fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
    }
    let timeout = within.and_then(|d| rustix::event::Timespec::try_from(d).ok());
    match poll(&mut fds, timeout.as_ref()) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(_) => std::thread::sleep(Duration::from_millis(10)),
    }
    (
        fds[..n_sup].iter().any(|f| !f.revents().is_empty()),
        fds.get(n_sup).is_some_and(|f| !f.revents().is_empty()),
    )
}

/// Entry point of `colloc step run`.
///
/// # Errors
/// The supervisor cannot be started, or no run came on stdin (colloc went away).
pub fn main(nvml_library: &str) -> anyhow::Result<ExitCode> {
    // Before any thread exists: the supervisor is forked from this process.
    let mut launcher = LocalLauncher::start()?;
    sys::ignore_signals(&sys::SUPERVISOR_IGNORES);
    let stdin = io::stdin();
    let stdin_fd = stdin.as_fd();
    say(&hello());
    let mut input = Lines {
        buf: Vec::new(),
        eof: false,
    };
    input.fill(stdin_fd, true);
    let Some(first) = input.next() else {
        // colloc went away before saying what to run.
        return Ok(ExitCode::SUCCESS);
    };
    let spec: StepSpec = serde_json::from_str(&first)
        .map_err(|e| anyhow::anyhow!("the run's spec from colloc run is not valid: {e}"))?;
    rustix::io::ioctl_fionbio(stdin_fd, true)?;
    let base = Instant::now();
    let start_ts = unix_now();
    let stdout = io::stdout();
    if let Err(e) = launcher.launch_to(0, ID, &spec.launch, stdout.as_fd()) {
        say(&StepMsg::Error(format!("cannot start: {e}")));
        say(&StepMsg::Done {
            left: 0,
            ts: unix_now(),
        });
        return Ok(ExitCode::SUCCESS);
    }
    // NVML after the start: the run does not wait for the driver's initialization.
    let gpu = start_sampler(&spec, nvml_library, base);
    let job = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|j| j.trim().parse().ok());
    let mut served = super::live::Served::start(&spec, start_ts, job);
    let mut colloc_gone = false;
    loop {
        if let Some(m) = served.as_mut() {
            m.refresh(|| {
                gpu.as_ref()
                    .and_then(|g| g.sampler.current(&[ID]).pop().flatten())
            });
        }
        let sup: Vec<(usize, BorrowedFd<'_>)> = launcher.fds();
        let wait = served.as_ref().map(|_| super::live::REFRESH);
        let (sup_ready, in_ready) = wait_ready(&sup, (!colloc_gone).then_some(stdin_fd), wait);
        if in_ready {
            input.fill(stdin_fd, false);
            while let Some(l) = input.next() {
                let cmd = match serde_json::from_str::<Control>(&l) {
                    Ok(Control::Signal(s)) => Cmd::Signal(s),
                    Ok(Control::Kill) => Cmd::Kill,
                    Ok(Control::Rate { value, unit }) => {
                        if let Some(m) = served.as_mut() {
                            m.rate(value, unit.as_deref());
                        }
                        continue;
                    }
                    Err(_) => continue,
                };
                launcher.send(0, ID, cmd);
            }
            if input.eof {
                // colloc, or its srun, is gone: nothing of the run may outlive it.
                colloc_gone = true;
                launcher.send(0, ID, Cmd::Kill);
            }
        }
        if !sup_ready {
            continue;
        }
        let (msgs, gone) = launcher.read(0);
        for (_, m) in msgs {
            match m {
                Msg::Pid(pid) => {
                    if let Some(g) = &gpu {
                        // The run's processes are its session.
                        g.sampler.session(ID, pid);
                    }
                    say(&StepMsg::Started { pid, ts: start_ts });
                }
                Msg::Error(e) => say(&StepMsg::Error(e)),
                Msg::Exit(c) => say(&StepMsg::Exit(c)),
                Msg::Signaled(s) => say(&StepMsg::Signaled(s)),
                Msg::Escaped { pid, comm } => say(&StepMsg::Escaped { pid, comm }),
                Msg::Done { left } => {
                    let end_ts = unix_now();
                    if let Some(g) = gpu {
                        say(&g.finish());
                    }
                    say(&StepMsg::Done { left, ts: end_ts });
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        if gone {
            say(&StepMsg::Error(super::protocol::SUPERVISOR_GONE.into()));
            say(&StepMsg::Done {
                left: 0,
                ts: unix_now(),
            });
            return Ok(ExitCode::from(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_whole_and_end_of_file_is_seen() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        w.write_all(b"{\"a\":1}\n\"kill\"\n{\"sig").unwrap();
        let mut l = Lines {
            buf: Vec::new(),
            eof: false,
        };
        l.fill(r.as_fd(), true);
        assert_eq!(l.next().as_deref(), Some("{\"a\":1}"));
        assert_eq!(l.next().as_deref(), Some("\"kill\""));
        assert_eq!(l.next(), None);
        drop(w);
        l.fill(r.as_fd(), true);
        assert!(l.eof);
        assert_eq!(l.next(), None);
    }
}
