//! A `log::Log` that forwards to Slurm's own logging, so colloc-core's messages land where
//! Slurm writes: the user's terminal for sbatch/srun, slurmd's log for prolog/epilog.

use std::sync::OnceLock;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Where a formatted line goes: Slurm's logging, given by the FFI layer at [`init`] (so
/// this module does not import it back).
pub type Sink = fn(Level, &str);

struct SlurmLog;

static LOGGER: SlurmLog = SlurmLog;
static SINK: OnceLock<Sink> = OnceLock::new();

impl Log for SlurmLog {
    fn enabled(&self, metadata: &Metadata) -> bool {
        // Slurm filters by its own configured levels; we pass everything but trace.
        metadata.level() <= Level::Debug
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = match record.level() {
            Level::Warn => format!("colloc: warning: {}", record.args()),
            Level::Error => format!("colloc: {}", record.args()),
            _ => format!("colloc: {}", record.args()),
        };
        if let Some(sink) = SINK.get() {
            sink(record.level(), &line);
        }
    }

    fn flush(&self) {}
}

/// Install the logger, writing to `sink`, once per process. Another logger already
/// installed (not expected inside Slurm) is left in place.
pub fn init(sink: Sink) {
    if SINK.set(sink).is_ok() && log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Debug);
    }
}
