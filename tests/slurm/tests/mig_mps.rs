//! MPS inside MIG instances (issue 29) on a real Slurm node with the fake driver and the
//! stand-in MPS control program: `--colloc=mig:3g:mps:2` makes two 3g instances and one
//! MPS daemon in each, as the job's user, each serving only its instance; `colloc run`
//! inside the job gives each run its instance and that instance's daemon; after the job
//! no daemon, no instance and no directory is left and the node is up. A daemon that
//! does not start in one instance refuses the job, leaves the GPU whole and the node up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use colloc_slurm_tests::{colloc_bin, pid_alive, processes_of_pipe_dir, run_suite, Cluster, Test};

fn main() {
    let tests: &[Test] = &[
        (
            "one_mps_daemon_per_mig_instance_each_serving_only_it",
            one_daemon_per_instance,
        ),
        (
            "a_daemon_that_does_not_start_refuses_the_job_not_the_node",
            daemon_fails_in_one_instance,
        ),
    ];
    run_suite(1, None, tests, &[]);
}

fn assert_clean(c: &Cluster) {
    assert_eq!(c.node_state(), "idle", "node not idle: {}", c.node_reason());
    assert_eq!(c.squeue(), "");
    assert!(c.journals().is_empty(), "journals left: {:?}", c.journals());
    assert!(
        c.instances(0).is_empty(),
        "instances left: {:?}",
        c.instances(0)
    );
    let left: Vec<PathBuf> = std::fs::read_dir(c.run_dir())
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in run_dir: {left:?}");
}

/// `KEY=VALUE` lines of a job's output.
fn vars(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `CUDA_VISIBLE_DEVICES` in a process's environment.
fn visible_devices(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|v| {
        v.strip_prefix(b"CUDA_VISIBLE_DEVICES=")
            .map(|d| String::from_utf8_lossy(d).into_owned())
    })
}

/// MPS programs whose `CUDA_MPS_PIPE_DIRECTORY` lies under `dir`.
fn mps_processes_under(dir: &Path) -> Vec<u32> {
    let prefix = format!("CUDA_MPS_PIPE_DIRECTORY={}/", dir.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("nvidia-cuda-mps"))
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|v| v.starts_with(prefix.as_bytes()))
            })
        })
        .collect()
}

fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

fn nobody_uid() -> u32 {
    let out = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .expect("id -u nobody");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A folder the job's user (nobody) can write.
fn open_dir(c: &Cluster, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = c.jobs_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("seen")).unwrap();
    for d in [dir.clone(), dir.join("seen")] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    dir
}

fn one_daemon_per_instance(c: &Cluster) {
    let dir = open_dir(c, "migmps");
    // Four runs of 2 s each: what each saw, then its end.
    let run = r#"f=SEEN/$COLLOC_RUN_NAME; echo "$CUDA_VISIBLE_DEVICES|$CUDA_MPS_PIPE_DIRECTORY|$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT|$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE|$(cat $CUDA_MPS_PIPE_DIRECTORY/devices)" > $f.start; sleep 2; echo img/s=10; touch $f.end"#
        .replace("SEEN", &dir.join("seen").display().to_string());
    std::fs::write(
        dir.join("runs.toml"),
        format!(
            "[[sweep]]\nname = 'r{{i}}'\ncommand = ['bash', '-c', '''{run}''']\ngrid = {{ i = [1, 2, 3, 4] }}\n"
        ),
    )
    .unwrap();
    let ready = dir.join("ready");
    let go = dir.join("go");
    let script = format!(
        "echo MODE=$COLLOC_MODE\necho SLOTS=$COLLOC_SLOTS\necho DEVICES=$COLLOC_DEVICES\n\
         echo PIPES=$COLLOC_MPS_PIPES\necho LIMIT=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT\n\
         for kv in ${{COLLOC_MPS_PIPES//,/ }}; do p=${{kv#*=}}; \
         echo \"SERVES_${{kv%%=*}}=$(cat $p/devices) $(cat $p/nvidia-cuda-mps-control.pid) $(stat -c '%U:%a' $p)\"; done\n\
         export COLLOC_CONFIG={config}\ncd {dir}\n\
         {colloc} run --grace 2s --status-every 1h --report-dir {dir}/report -f runs.toml\n\
         echo COLLOC_RC=$?\ntouch {ready}\nwhile [ ! -e {go} ]; do sleep 0.1; done\n",
        config = c.colloc_config().display(),
        dir = dir.display(),
        colloc = colloc_bin().display(),
        ready = ready.display(),
        go = go.display(),
    );
    let id = c.submit(
        &[
            "--colloc=mig:3g:mps:2",
            "--gres=gpu:1",
            "--uid=nobody",
            "--gid=nogroup",
        ],
        &script,
    );
    c.wait_for_file(id, &ready);
    let out = c.job_out(id);
    let v = vars(&out);
    assert_eq!(v["MODE"], "mig:3g.20gbx2:mps:2", "{out}");
    assert_eq!(v["SLOTS"], "4", "{out}");
    assert_eq!(v["COLLOC_RC"], "0", "{out}\n{}", c.job_err(id));
    // 3g.20gb on an A100-40GB has 19968 MiB: half of it per client.
    assert_eq!(v["LIMIT"], "0=9984M", "{out}");
    let uuids = c.nodes()[0].mig_uuids();
    assert_eq!(uuids.len(), 2, "{:?}", c.instances(0));
    let devices: BTreeSet<&str> = v["DEVICES"].split(',').collect();
    assert_eq!(v["DEVICES"].split(',').count(), 4);
    assert_eq!(devices, uuids.iter().map(String::as_str).collect());
    // One daemon per instance: its own pipe directory (the job user's, 0700), started
    // with that instance's UUID alone, running as the job's user.
    let pipes: BTreeMap<String, String> = v["PIPES"]
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        pipes.keys().collect::<BTreeSet<_>>(),
        uuids.iter().collect::<BTreeSet<_>>()
    );
    let mut daemons = Vec::new();
    for (uuid, pipe) in &pipes {
        assert!(Path::new(pipe).starts_with(c.run_dir()), "{pipe}");
        let serves = &v[&format!("SERVES_{uuid}")];
        let f: Vec<&str> = serves.split(' ').collect();
        assert_eq!(f[0], uuid, "the daemon of {pipe} serves {serves}");
        assert_eq!(f[2], "nobody:700", "{pipe}");
        let pid: u32 = f[1].parse().expect("daemon pid");
        assert!(pid_alive(pid), "daemon {pid} of {uuid} not running");
        assert_eq!(processes_of_pipe_dir(pipe), vec![pid]);
        assert_eq!(visible_devices(pid).as_deref(), Some(uuid.as_str()));
        assert_eq!(uid_of(pid), Some(nobody_uid()));
        daemons.push((pid, pipe.clone()));
    }
    assert_ne!(daemons[0].1, daemons[1].1);
    // Each run: its instance in CUDA_VISIBLE_DEVICES, that instance's daemon, the
    // client limits; the runs spread over both instances and ran at once.
    let mut used = BTreeMap::new();
    for i in 1..=4 {
        let seen_file = dir.join(format!("seen/r{i}.start"));
        let seen = std::fs::read_to_string(&seen_file)
            .unwrap_or_else(|e| panic!("{}: {e}", seen_file.display()));
        let f: Vec<&str> = seen.trim().split('|').collect();
        assert_eq!(f.len(), 5, "{seen}");
        assert!(uuids.iter().any(|u| u == f[0]), "run r{i} on {}", f[0]);
        assert_eq!(
            f[1], pipes[f[0]],
            "run r{i} talks to another instance's daemon"
        );
        assert_eq!(f[4], f[0], "run r{i}'s daemon serves {}", f[4]);
        assert_eq!((f[2], f[3]), ("0=9984M", "50"), "run r{i}");
        assert!(dir.join(format!("seen/r{i}.end")).exists());
        *used.entry(f[0].to_string()).or_insert(0) += 1;
    }
    assert_eq!(
        used.values().copied().collect::<Vec<_>>(),
        [2, 2],
        "{used:?}"
    );
    std::fs::write(&go, b"").unwrap();
    let end = c.wait_done(id);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(id));
    for (pid, pipe) in &daemons {
        assert!(!pid_alive(*pid), "daemon {pid} still runs");
        assert!(processes_of_pipe_dir(pipe).is_empty());
        assert!(!Path::new(pipe).exists(), "{pipe} left");
    }
    assert_clean(c);
}

fn daemon_fails_in_one_instance(c: &Cluster) {
    let before = c.gpu_layout();
    // The instances mig:3g makes (the same placements, so the same UUIDs).
    let probe = c.submit(
        &["--colloc=mig:3g", "--gres=gpu:1"],
        "echo DEVICES=$COLLOC_DEVICES",
    );
    let end = c.wait_done(probe);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(probe));
    let devices = vars(&c.job_out(probe))["DEVICES"].clone();
    let uuids: Vec<&str> = devices.split(',').collect();
    assert_eq!(uuids.len(), 2, "{devices}");
    assert_clean(c);
    // The second instance's daemon cannot start; the first one's does.
    let refuse = c
        .fake_state_path()
        .parent()
        .unwrap()
        .join("fake-mps-refuse");
    std::fs::write(&refuse, format!("{}\n", uuids[1])).unwrap();
    let id = c.submit(&["--colloc=mig:3g:mps", "--gres=gpu:1"], "echo RAN");
    let end = c.wait_done(id);
    let _ = std::fs::remove_file(&refuse);
    assert_eq!(end.state, "FAILED", "{end:?}");
    assert_eq!(end.exit_code, "1:0", "{end:?}");
    assert!(!c.job_out(id).contains("RAN"), "the job's script ran");
    let err = c.job_err(id);
    assert!(
        err.contains(&format!(
            "the MPS daemon did not start in MIG instance {}",
            uuids[1]
        )) && err.contains("cannot start a daemon"),
        "stderr: {err}"
    );
    // Everything undone: the first instance's daemon too, both instances, the folders.
    let job_dir = c.run_dir().join(format!("job-{id}"));
    assert_eq!(mps_processes_under(&job_dir), Vec::<u32>::new());
    assert!(!job_dir.exists());
    assert_eq!(c.gpu_layout(), before, "the GPU is not whole");
    assert_clean(c);
    // The node takes the next job.
    let next = c.submit(
        &["--colloc=mig:3g:mps", "--gres=gpu:1"],
        "echo SLOTS=${COLLOC_SLOTS:-unset}",
    );
    let end = c.wait_done(next);
    assert_eq!(end.state, "COMPLETED", "{end:?}: {}", c.job_err(next));
    assert!(
        c.job_out(next).contains("SLOTS=unset"),
        "{}",
        c.job_out(next)
    );
    assert_clean(c);
}
