//! What GPM reads on this machine's GPUs: one line per GPU and second, from
//! `NvmlGpus::gpm_sampler`, with the time each read took. Read-only.
//!
//! ```sh
//! cargo build --release -p colloc-core --example gpm_probe
//! target/release/examples/gpm_probe [LIBRARY] [SECONDS]   # default libnvidia-ml.so.1, 5
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use colloc_core::nvml::NvmlGpus;

/// Every log line to stderr: the sampler says why it has no reading at debug level.
struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        eprintln!("{}: {}", r.level(), r.args());
    }
    fn flush(&self) {}
}

fn main() {
    let _ = log::set_logger(&Stderr).map(|()| log::set_max_level(log::LevelFilter::Debug));
    let mut args = std::env::args().skip(1);
    let lib = args.next().unwrap_or_else(|| "libnvidia-ml.so.1".into());
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let gpus = match NvmlGpus::open(&lib) {
        Ok(g) => Arc::new(g),
        Err(e) => {
            eprintln!("Error: {e}");
            std::process::exit(1);
        }
    };
    let count = gpus.nvml().device_count().unwrap_or(0);
    let mut samplers: Vec<_> = (0..count)
        .map(|i| {
            let t = Instant::now();
            let s = gpus.gpm_sampler(i);
            println!(
                "gpu {i}: sampler {} ({:.2} ms)",
                if s.is_some() { "yes" } else { "none" },
                t.elapsed().as_secs_f64() * 1e3
            );
            s
        })
        .collect();
    for second in 0..=secs {
        for (i, s) in samplers.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            let t = Instant::now();
            let r = s.read();
            let util = gpus
                .nvml()
                .device_by_index(i as u32)
                .and_then(|d| d.utilization_rates())
                .map(|u| u.gpu);
            println!(
                "t={second} gpu {i}: {r:?} read {:.2} ms; utilization {util:?}",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}
