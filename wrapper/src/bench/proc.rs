//! Copies of the workload as child processes: each in its own process group (so its
//! data-loader workers stop with it) and with a parent-death signal (so nothing outlives
//! colloc), its output logged and its throughput lines timestamped as they arrive.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::metric::Metric;

/// What a reader thread reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// A throughput line of copy `copy`, read at `t` seconds since the benchmark began.
    Rate {
        /// Copy index.
        copy: usize,
        /// Seconds since start.
        t: f64,
        /// Samples per second.
        rate: f64,
    },
    /// One of the copy's output streams closed.
    Closed {
        /// Copy index.
        copy: usize,
    },
}

/// A running copy.
#[derive(Debug)]
pub struct Copy {
    /// Index among the copies of its configuration (`COLLOC_RUN_INDEX`).
    pub index: usize,
    child: Child,
    pgid: i32,
    /// How it ended, once it has.
    pub status: Option<ExitStatus>,
    /// Where its output goes.
    pub log: std::path::PathBuf,
}

/// Start one copy of `cmd` with `env` added; its stdout and stderr go to `log`, and
/// throughput lines as [`Event::Rate`] to `tx`.
///
/// # Errors
/// The log cannot be created or the program cannot be started.
pub fn spawn(
    index: usize,
    cmd: &[String],
    env: &[(String, String)],
    log: &Path,
    metric: &Arc<Metric>,
    clock: Instant,
    tx: &Sender<Event>,
) -> anyhow::Result<Copy> {
    let file = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let file = Arc::new(Mutex::new(file));
    let mut command = Command::new(&cmd[0]);
    command
        .args(&cmd[1..])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
    // which is async-signal-safe; it touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", cmd[0]))?;
    let pgid = child.id() as i32;
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let (file, metric, tx) = (Arc::clone(&file), Arc::clone(metric), tx.clone());
        std::thread::spawn(move || read_lines(stream, index, &file, &metric, clock, &tx));
    }
    Ok(Copy {
        index,
        child,
        pgid,
        status: None,
        log: log.to_path_buf(),
    })
}

/// Split output on `\n` and `\r` (progress bars), log it, and report throughput lines.
fn read_lines(
    mut stream: Box<dyn Read + Send>,
    copy: usize,
    file: &Mutex<File>,
    metric: &Metric,
    clock: Instant,
    tx: &Sender<Event>,
) {
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let handle = |line: &[u8]| {
        let t = clock.elapsed().as_secs_f64();
        if let Ok(mut f) = file.lock() {
            let _ = f.write_all(line);
            let _ = f.write_all(b"\n");
        }
        if let Some(rate) = metric.parse(&String::from_utf8_lossy(line)) {
            let _ = tx.send(Event::Rate { copy, t, rate });
        }
    };
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                for &b in &buf[..n] {
                    if b == b'\n' || b == b'\r' {
                        if !line.is_empty() {
                            handle(&line);
                            line.clear();
                        }
                    } else if line.len() < 1 << 16 {
                        line.push(b);
                    }
                }
            }
        }
    }
    if !line.is_empty() {
        handle(&line);
    }
    let _ = tx.send(Event::Closed { copy });
}

impl Copy {
    /// Has it exited? Reaps it once.
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
            }
        }
        self.status
    }

    fn signal_group(&self, sig: i32) {
        // A reaped leader's group may be gone; ESRCH is expected then.
        // SAFETY: kill(2) with a negative pid signals the process group we created for
        // this copy (process_group(0) made its pid the group id); no memory is shared.
        let _ = unsafe { libc::kill(-self.pgid, sig) };
    }

    /// The last lines of its log, for an error message.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let from = tail.len().saturating_sub(lines);
        tail[from..].join(" | ")
    }
}

/// Stop copies: SIGTERM to every process group at once (so none runs on alone), up to
/// `grace` for them to end, then SIGKILL.
pub fn stop_all(copies: &mut [Copy], grace: Duration) {
    for c in copies.iter_mut() {
        if c.poll().is_none() {
            c.signal_group(libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    while copies.iter_mut().any(|c| c.poll().is_none()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in copies.iter_mut() {
        if c.poll().is_none() {
            log::warn!("copy {} did not stop on SIGTERM; killing it", c.index);
            c.signal_group(libc::SIGKILL);
            if let Ok(s) = c.child.wait() {
                c.status = Some(s);
            }
        }
    }
}

/// The signal that asked colloc to stop, 0 while none has.
#[derive(Debug, Clone)]
pub struct StopFlag(Arc<AtomicUsize>);

impl StopFlag {
    /// Catch SIGINT, SIGTERM and SIGHUP.
    ///
    /// # Errors
    /// The handlers cannot be installed.
    pub fn install() -> anyhow::Result<StopFlag> {
        let flag = Arc::new(AtomicUsize::new(0));
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            signal_hook::flag::register_usize(sig, Arc::clone(&flag), sig as usize)
                .context("cannot install signal handlers")?;
        }
        Ok(StopFlag(flag))
    }

    /// The signal received, if any.
    pub fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            s => Some(s as i32),
        }
    }
}

/// A signal's name for messages.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}
