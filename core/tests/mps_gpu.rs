//! The prolog's and epilog's MPS path on a real NVIDIA GPU (the lent H200), as root, with
//! the daemon running as an unprivileged user (`nobody`): the root-owned tree with the
//! user's leaves, the real `nvidia-cuda-mps-control` started and stopped through memory
//! files, and a daemon its user stopped (SIGSTOP) killed within the budget.
//!
//! Run there as root with the built test binary and `--ignored --test-threads=1`. It never
//! changes the card's settings (no MIG, no compute mode): it starts MPS daemons only and
//! stops every one it starts. `COLLOC_NVML_LIBRARY` names the library (default
//! `libnvidia-ml.so.1`, then `/usr/local/nvidia/lib64/libnvidia-ml.so.1`);
//! `COLLOC_MPS_CONTROL` the control program (default: found as the prolog finds it). With
//! the fake library, its state in `COLLOC_FAKE_NVML_STATE` and the stand-in control
//! program of `tests/fake-mps`, they also run without a GPU.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Instant;

use colloc_core::config::Config;
use colloc_core::mps;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, Outcome};

const NOBODY: (u32, u32) = (65534, 65534);

fn nvml() -> (NvmlGpus, String) {
    let candidates = match std::env::var("COLLOC_NVML_LIBRARY") {
        Ok(l) => vec![l],
        Err(_) => vec![
            "libnvidia-ml.so.1".to_string(),
            "/usr/local/nvidia/lib64/libnvidia-ml.so.1".to_string(),
        ],
    };
    for lib in &candidates {
        if let Ok(g) = NvmlGpus::open(lib) {
            return (g, lib.clone());
        }
    }
    panic!("no NVML in {candidates:?}");
}

/// A node config in a fresh directory that `nobody` can traverse (its pipe directory
/// lies below it).
fn node(dir: &std::path::Path, lib: &str) -> Config {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    Config {
        state_dir: dir.join("state"),
        run_dir: dir.join("run"),
        nvml_library: lib.to_string(),
        mps_control: std::env::var("COLLOC_MPS_CONTROL")
            .unwrap_or_else(|_| Config::default().mps_control),
        ..Config::default()
    }
}

fn root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

fn apply(cfg: &Config, gpus: &NvmlGpus, job: u32) -> Vec<(String, String)> {
    let spec = JobSpec {
        job,
        uid: NOBODY.0,
        gid: NOBODY.1,
        gpus: vec![0],
        mode: "mps".parse().unwrap(),
    };
    match reconfig::prolog(cfg, gpus, &spec).unwrap() {
        Outcome::Applied(env) => env,
        other => panic!("not applied: {other:?}"),
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_real_daemon_runs_as_the_user_in_its_leaves_and_is_stopped() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (gpus, lib) = nvml();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = node(tmp.path(), &lib);
    assert!(
        cfg.mps_control_path().is_some(),
        "nvidia-cuda-mps-control not found"
    );
    let env = apply(&cfg, &gpus, 1);
    let pipe = env
        .iter()
        .find(|(k, _)| k == "CUDA_MPS_PIPE_DIRECTORY")
        .map(|(_, v)| std::path::PathBuf::from(v))
        .unwrap();
    for (p, owner) in [
        (cfg.run_dir.join("job-1"), 0),
        (cfg.run_dir.join("job-1/gpu0"), 0),
        (pipe.clone(), NOBODY.0),
    ] {
        assert_eq!(
            std::fs::metadata(&p).unwrap().uid(),
            owner,
            "{}",
            p.display()
        );
    }
    let j = reconfig::job_state(&cfg, 1).unwrap().unwrap();
    let procs = mps::daemon_processes(&j.mps[0], NOBODY.0);
    assert!(!procs.is_empty(), "no daemon of nobody's found");
    // The real control program answers as the first process of a PID namespace of its
    // own (how root runs everything but `-d`): no client yet, so no server.
    let program = cfg.mps_control_path().unwrap();
    let servers = mps::server_list(&program, &j.mps[0], Some(NOBODY));
    assert_eq!(servers.unwrap(), Vec::<u32>::new());
    let t = Instant::now();
    let r = reconfig::restore(&cfg, None, 1).unwrap();
    println!(
        "restore of a real daemon: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    assert!(
        r.killed.is_empty(),
        "the daemon did not quit: killed {:?}",
        r.killed
    );
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert!(procs.iter().all(|p| p.gone()));
    assert!(!cfg.run_dir.join("job-1").exists());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_stopped_real_daemon_is_killed_within_the_budget() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (gpus, lib) = nvml();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = node(tmp.path(), &lib);
    apply(&cfg, &gpus, 2);
    let j = reconfig::job_state(&cfg, 2).unwrap().unwrap();
    let procs = mps::daemon_processes(&j.mps[0], NOBODY.0);
    assert!(!procs.is_empty());
    for p in &procs {
        p.signal(libc::SIGSTOP);
    }
    let t = Instant::now();
    let r = reconfig::restore(&cfg, None, 2).unwrap();
    let took = t.elapsed();
    println!(
        "restore of a stopped real daemon: {:.2} s",
        took.as_secs_f64()
    );
    assert!(took <= reconfig::MPS_RESTORE_BUDGET, "{took:?}");
    assert!(!r.killed.is_empty(), "a stopped daemon cannot quit");
    assert!(procs.iter().all(|p| p.gone()));
    assert!(!cfg.run_dir.join("job-2").exists());
}

/// A mount namespace made as `job_container/tmpfs` makes a job's (private `/tmp` and
/// `/dev/shm`), kept by a bind mount of it on `BASE/<job>/.ns`, with a process inside;
/// dropped: the process killed, the bind mount gone.
struct JobContainer {
    holder: std::process::Child,
    ns_file: std::path::PathBuf,
}

impl JobContainer {
    fn new(base: &std::path::Path, job: u32) -> JobContainer {
        use std::io::BufRead;
        let dir = base.join(job.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut holder = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(
                "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && \
                 mount -t tmpfs -o mode=1777 tmpfs /tmp && echo ready && exec sleep 600",
            )
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("unshare (util-linux)");
        let mut line = String::new();
        std::io::BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "unshare/mount failed (needs CAP_SYS_ADMIN)"
        );
        let ns_file = dir.join(".ns");
        std::fs::write(&ns_file, "").unwrap();
        let st = std::process::Command::new("mount")
            .arg("--bind")
            .arg(format!("/proc/{}/ns/mnt", holder.id()))
            .arg(&ns_file)
            .status()
            .unwrap();
        assert!(st.success(), "bind mount of the namespace");
        JobContainer { holder, ns_file }
    }

    fn ns(&self) -> String {
        mount_ns(self.holder.id())
    }

    /// Run `sh -c script` as nobody inside the namespace, within `secs` seconds:
    /// (exit status, stdout + stderr).
    fn run_as_nobody(&self, env: &[(&str, String)], script: &str, secs: u32) -> (i32, String) {
        let mut cmd = std::process::Command::new("timeout");
        cmd.arg(secs.to_string())
            .arg("nsenter")
            .arg(format!("--mount={}", self.ns_file.display()))
            .args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "env",
                "HOME=/tmp",
            ]);
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        let out = cmd.args(["sh", "-c", script]).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for JobContainer {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = std::process::Command::new("umount")
            .arg(&self.ns_file)
            .status();
    }
}

/// Restores a job when dropped, also when the test fails part way: every daemon the test
/// started is stopped.
struct RestoreOnDrop<'a> {
    cfg: &'a Config,
    job: u32,
}

impl Drop for RestoreOnDrop<'_> {
    fn drop(&mut self) {
        if let Err(e) = reconfig::restore(self.cfg, None, self.job) {
            eprintln!("restore of job {}: {e}", self.job);
        }
    }
}

fn mount_ns(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// A CUDA client (PyTorch) that must go through MPS: it prints the sum of 1000 ones.
/// `COLLOC_CUDA_CLIENT` replaces it (a shell command that prints `SUM 1000.0`).
fn client() -> String {
    std::env::var("COLLOC_CUDA_CLIENT").unwrap_or_else(|_| CLIENT.to_string())
}

const CLIENT: &str = "python3 -c \"import torch; x = torch.ones(1000, device='cuda'); \
                      print('SUM', float(x.sum()))\"";

/// The job's MPS daemon started as the extern step starts it under `PrologFlags=Contain`
/// with `job_container/tmpfs` (colloc's `start_mps_in_extern_step`, entering the job's
/// namespace through its holder file): it runs in the job's namespace, and a CUDA client
/// of the job's user there, sharing the job's private `/dev/shm`, is served by it (an
/// MPS server appears). Then the other way round, as a measurement: a daemon started
/// by the prolog in the host's namespace and a client in the job's. Needs root,
/// `unshare`, `nsenter`, `setpriv` and python3 with torch that user nobody can import
/// (or `COLLOC_CUDA_CLIENT`). With the fake NVML and fake MPS it runs up to the client.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_real_daemon_started_into_a_job_container_serves_a_client_there() {
    use colloc_core::mps::MpsStart;
    use colloc_core::reconfig::ExternStart;
    use colloc_core::slurmconf::SlurmFacts;
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (gpus, lib) = nvml();
    // Not under /tmp: the job's /tmp is its own.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let cfg = node(tmp.path(), &lib);
    let base = tmp.path().join("containers");
    let job = 7;
    let container = JobContainer::new(&base, job);
    let spec = JobSpec {
        job,
        uid: NOBODY.0,
        gid: NOBODY.1,
        gpus: vec![0],
        mode: "mps".parse().unwrap(),
    };
    let _restore = RestoreOnDrop { cfg: &cfg, job };
    let env = match reconfig::prolog_with(&cfg, &gpus, &spec, MpsStart::ExternStep).unwrap() {
        Outcome::Applied(env) => env,
        other => panic!("not applied: {other:?}"),
    };
    let facts = SlurmFacts {
        contain: true,
        tmpfs_container: true,
        base_paths: vec![base.clone()],
        ..SlurmFacts::default()
    };
    let t = Instant::now();
    let started = reconfig::start_mps_in_extern_step(&cfg, job, || facts.clone()).unwrap();
    println!(
        "extern-step start of a real daemon: {:.2} s: {started:?}",
        t.elapsed().as_secs_f64()
    );
    assert!(
        matches!(
            &started,
            ExternStart::Started {
                holder: Some(_),
                ..
            }
        ),
        "{started:?}"
    );
    let j = reconfig::job_state(&cfg, job).unwrap().unwrap();
    let procs = mps::daemon_processes(&j.mps[0], NOBODY.0);
    assert!(!procs.is_empty(), "no daemon of nobody's found");
    let daemon_ns = mount_ns(procs[0].pid());
    println!(
        "daemon {} in {daemon_ns}; job container {}; host {}",
        procs[0].pid(),
        container.ns(),
        mount_ns(std::process::id())
    );
    assert_eq!(daemon_ns, container.ns());
    let env: Vec<(&str, String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("CUDA_MPS_"))
        .map(|(k, v)| (k.as_str(), v.clone()))
        .chain(
            std::env::var("LD_LIBRARY_PATH")
                .ok()
                .map(|v| ("LD_LIBRARY_PATH", v)),
        )
        .collect();
    let t = Instant::now();
    let (code, out) = container.run_as_nobody(&env, &client(), 180);
    println!(
        "client in the job container, daemon there too: exit {code} in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        out.trim()
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("SUM 1000.0"), "{out}");
    let program = cfg.mps_control_path().unwrap();
    let servers = mps::server_list(&program, &j.mps[0], Some(NOBODY)).unwrap();
    println!("MPS servers after the client: {servers:?}");
    assert!(!servers.is_empty(), "the client did not go through MPS");
    for s in &servers {
        assert_eq!(mount_ns(*s), container.ns(), "server {s}");
    }
    let r = reconfig::restore(&cfg, None, job).unwrap();
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert!(procs.iter().all(|p| p.gone()));

    // The measurement: the daemon in the host's namespace (as the prolog started it
    // before), the client in the job's.
    let job = 8;
    let spec = JobSpec { job, ..spec };
    let _restore8 = RestoreOnDrop { cfg: &cfg, job };
    let env = match reconfig::prolog(&cfg, &gpus, &spec).unwrap() {
        Outcome::Applied(env) => env,
        other => panic!("not applied: {other:?}"),
    };
    let env: Vec<(&str, String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("CUDA_MPS_"))
        .map(|(k, v)| (k.as_str(), v.clone()))
        .chain(
            std::env::var("LD_LIBRARY_PATH")
                .ok()
                .map(|v| ("LD_LIBRARY_PATH", v)),
        )
        .collect();
    let t = Instant::now();
    let (code, out) = container.run_as_nobody(&env, &client(), 120);
    let j = reconfig::job_state(&cfg, job).unwrap().unwrap();
    let servers = mps::server_list(&program, &j.mps[0], Some(NOBODY)).unwrap_or_default();
    println!(
        "MEASURED client in the job container, daemon in the host's namespace: exit {code} \
         in {:.1} s, MPS servers {servers:?}: {}",
        t.elapsed().as_secs_f64(),
        out.trim()
    );
    let r = reconfig::restore(&cfg, None, job).unwrap();
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}
