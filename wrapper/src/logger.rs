//! A small `log::Log` that writes `colloc: LEVEL: message` lines to stderr.

use log::{Level, LevelFilter, Log, Metadata, Record};

struct StderrLog;

impl Log for StderrLog {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            let level = match r.level() {
                Level::Error => "error",
                Level::Warn => "warning",
                Level::Info => "info",
                Level::Debug => "debug",
                Level::Trace => "trace",
            };
            // Run and host names in a message never reach the terminal raw.
            let msg = r.args().to_string();
            errln!("colloc: {level}: {}", colloc_results::text::escape(&msg));
        }
    }
    fn flush(&self) {}
}

static LOGGER: StderrLog = StderrLog;

/// Install the logger: warnings by default, `-v` info, `-vv` debug; `COLLOC_LOG`
/// (error, warn, info, debug, trace) overrides.
pub fn init(verbose: u8) {
    let level = std::env::var("COLLOC_LOG")
        .ok()
        .and_then(|v| v.parse::<LevelFilter>().ok())
        .unwrap_or(match verbose {
            0 => LevelFilter::Warn,
            1 => LevelFilter::Info,
            _ => LevelFilter::Debug,
        });
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
