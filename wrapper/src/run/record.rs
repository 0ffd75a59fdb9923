//! `colloc run`'s side of the durable record: every event goes to the event log (flushed
//! as it happens) and into a [`Fold`] of the same events, from which the report is
//! rendered. `colloc-report.json` and `colloc-runs.csv` are rewritten atomically by a
//! background writer after an attempt ends or a signal comes (no more often than
//! [`MIN_GAP`], or ten times the last write's duration, so a pack of 2,000 short runs does
//! not spend its time rewriting) and, for the progress of running attempts, every
//! [`MAX_GAP`]; at the end once more, and the charts.
//!
//! The writer is handed a snapshot of the fold (a clone that shares every run: a pointer
//! a run, and the main thread copies only a run it changes while the snapshot lives) and
//! writes the report from it as its runs are made ([`Fold::streamed`]): no copy of the
//! report is ever whole in memory (issue 39: a 100,000-run pack held its fold and a
//! report as large beside it).

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::Clock;
use colloc_results::export::chart;
pub use colloc_results::export::files::write_report;
use colloc_results::export::files::write_streamed;
use colloc_results::record::events::Event;
use colloc_results::record::fold::Fold;
use colloc_results::record::model::Report;
use colloc_results::record::store::{EventLog, ReportDir};
pub use colloc_results::record::store::{REPORT_CSV, REPORT_JSON};

/// Least time between two report rewrites after finished runs.
pub const MIN_GAP: Duration = Duration::from_millis(250);
/// Most time between two report rewrites while runs go on.
pub const MAX_GAP: Duration = Duration::from_secs(30);

/// A fold to write the report of, at `now` (Unix seconds), its session running.
struct Snapshot {
    fold: Fold,
    now: f64,
    session: u32,
}

#[derive(Default)]
struct Shared {
    next: Option<Snapshot>,
    stop: bool,
    busy: bool,
    last_took: Duration,
    error: Option<String>,
    warned: bool,
}

/// Writes the reports of fold snapshots on its own thread; the latest snapshot wins.
struct Writer {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    fn start(dir: Arc<ReportDir>) -> Writer {
        let shared: Arc<(Mutex<Shared>, Condvar)> = Arc::default();
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("report-writer".into())
            .spawn(move || loop {
                let snap = {
                    let (m, cv) = &*s;
                    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
                    while g.next.is_none() && !g.stop {
                        g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
                    }
                    match g.next.take() {
                        Some(r) => {
                            g.busy = true;
                            r
                        }
                        None => return,
                    }
                };
                let t = Instant::now();
                let result =
                    write_streamed(&dir, &snap.fold.streamed(snap.now, Some(snap.session)));
                // The snapshot's runs are the main thread's alone again.
                drop(snap);
                let (m, cv) = &*s;
                let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
                g.busy = false;
                g.last_took = t.elapsed();
                match result {
                    Ok(()) => g.error = None,
                    Err(e) => {
                        if !g.warned {
                            log::warn!("{e}; the previous report is kept (colloc report DIR rebuilds it from the event log)");
                            g.warned = true;
                        }
                        g.error = Some(e);
                    }
                }
                cv.notify_all();
            })
            .map_err(|e| log::warn!("cannot start the report writer ({e}); the report is written at the end"))
            .ok();
        Writer { shared, thread }
    }

    fn submit(&self, r: Snapshot) -> bool {
        if self.thread.is_none() {
            return false;
        }
        let (m, cv) = &*self.shared;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        g.next = Some(r);
        cv.notify_all();
        true
    }

    /// Is nothing being written or waiting to be? Then a new snapshot is the only one
    /// held: while one is written, every run the main thread changes is copied once, so
    /// a second one waiting would hold more copies for nothing.
    fn idle(&self) -> bool {
        let (m, _) = &*self.shared;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        !g.busy && g.next.is_none()
    }

    fn last_took(&self) -> Duration {
        let (m, _) = &*self.shared;
        m.lock().unwrap_or_else(|p| p.into_inner()).last_took
    }

    /// Wait until the queue is empty, then stop the thread.
    fn close(&mut self) {
        let (m, cv) = &*self.shared;
        {
            let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
            g.next = None;
            g.stop = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The record of one `colloc run` session.
pub struct Recorder {
    dir: Arc<ReportDir>,
    session: u32,
    clock: Clock,
    log: EventLog,
    fold: Fold,
    writer: Writer,
    last_write: Instant,
    dirty: bool,
    urgent: bool,
}

impl Recorder {
    /// Open the event file of `session` in `dir`, over `fold` (the record resumed, or
    /// empty).
    ///
    /// # Errors
    /// The event file cannot be created.
    pub fn open(
        dir: Arc<ReportDir>,
        session: u32,
        clock: Clock,
        fold: Fold,
    ) -> Result<Recorder, colloc_results::userfs::UserFsError> {
        let log = dir.event_log(session, "main")?;
        Ok(Recorder {
            writer: Writer::start(Arc::clone(&dir)),
            dir,
            session,
            clock,
            log,
            fold,
            last_write: Instant::now(),
            dirty: false,
            urgent: false,
        })
    }

    /// This session's number.
    pub fn session(&self) -> u32 {
        self.session
    }

    /// The report directory.
    pub fn dir(&self) -> &Arc<ReportDir> {
        &self.dir
    }

    /// Unix seconds of an engine time.
    pub fn ts(&self, t: f64) -> f64 {
        self.clock.unix(t)
    }

    /// Unix seconds now.
    pub fn now(&self) -> f64 {
        self.clock.unix(self.clock.now())
    }

    /// The record so far.
    pub fn fold(&self) -> &Fold {
        &self.fold
    }

    /// Record an event.
    pub fn emit(&mut self, ev: Event) {
        self.log.append(&ev);
        // An end, a signal, a stop: the report should show it soon.
        self.urgent |= !matches!(ev, Event::Progress { .. } | Event::Gpus { .. });
        self.fold.apply(ev);
        self.dirty = true;
    }

    /// The runs by state now, as the report would count them (without building it).
    pub fn state_counts(&self) -> colloc_results::record::model::Summary {
        self.fold.state_counts(Some(self.session))
    }

    /// Rewrite the report if it changed and the last write is long enough ago.
    pub fn maybe_write(&mut self) {
        if !self.dirty {
            return;
        }
        let gap = if self.urgent {
            MIN_GAP.max(self.writer.last_took() * 10)
        } else {
            MAX_GAP
        };
        if self.last_write.elapsed() < gap || !self.writer.idle() {
            return;
        }
        let r = Snapshot {
            fold: self.fold.clone(),
            now: self.now(),
            session: self.session,
        };
        if self.writer.submit(r) {
            self.last_write = Instant::now();
            self.dirty = false;
            self.urgent = false;
        }
    }

    /// End the session: stop the background writer, write the final report and charts.
    /// The report, and what could not be written.
    pub fn finish(mut self) -> (Report, Option<String>, Vec<PathBuf>) {
        self.writer.close();
        // The report holds what is shown and drawn from here on: the fold is given up as
        // the report is built.
        let now = self.now();
        let report = std::mem::take(&mut self.fold).into_report(now, None);
        let mut error = write_report(&self.dir, &report).err();
        if error.is_none() {
            if let Some(e) = &self.log.error {
                error = Some(format!("cannot append to the event log: {e}"));
            }
        }
        let charts = if error.is_none() {
            chart::run_charts(&report, &self.dir)
        } else {
            Vec::new()
        };
        (report, error, charts)
    }
}
