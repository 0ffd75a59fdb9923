//! Issue 35: what a user holds of their job's MPS directories from outside the job (a
//! login shell on the node, not in the job's cgroup) after the job. Each job's directory
//! is a tmpfs of its own (`job_dir_size_mib`, `job_dir_inodes`): whatever is held is
//! charged to it, the epilog kills the user's processes the kernel says use it and
//! detaches it, and the next job of any user is served. `run_dir` itself is a tiny tmpfs
//! here (64 inodes): before, one attacker filled it and every later MPS job was refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Stdio};

use colloc_slurm_tests::{ensure_user, pid_alive, Cluster, Profile};

use super::{args, as_user, assert_node_clean, profile_account, run_dir_entries, wait_job_end};
use super::{NodeMount, VICTIM};

/// The attacker's program: in `where`, create files until the file system says no, then
/// keep them as `how` says, write "PID COUNT" to `out`, and stay.
/// `write`: keep the files, the working directory inside, and go on trying to add more;
/// `unlinked`: unlink each, keep it open, `chdir /`; `scm`: unlink each, send its
/// descriptor over a socket pair that no one reads (`SCM_RIGHTS`), close it, `chdir /`.
const HOLDER: &str = r#"
import os, resource, socket, sys, time
how, where, out = sys.argv[1:4]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
os.chdir(where)
a, b = socket.socketpair()
a.setblocking(False)  # a full buffer ends the loop, as the in-flight limit does
keep = []
n = 0
while True:
    name = "f%d" % n
    try:
        fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        break
    if how != "write":
        os.unlink(name)
    if how == "scm":
        try:
            socket.send_fds(a, [b"x"], [fd])
        except OSError:
            os.close(fd)
            break
        os.close(fd)
    elif how == "unlinked":
        keep.append(fd)
    else:
        os.close(fd)
    n += 1
if how != "write":
    os.chdir("/")
tmp = out + ".tmp"
with open(tmp, "w") as f:
    f.write("%d %d\n" % (os.getpid(), n))
os.rename(tmp, out)
while True:
    if how == "write":
        try:
            os.close(os.open("g%d" % n, os.O_CREAT | os.O_WRONLY, 0o600))
            n += 1
        except OSError:
            pass
    time.sleep(0.05)
"#;

/// Where the attacker starts from: a login shell of `user` on the node (the node's mount
/// namespace, no job cgroup), optionally in a user and mount namespace of its own
/// (`unshare -Urm`) where it bind-mounts the job's log directory on a directory of its
/// own and works there.
fn login_shell(c: &Cluster, user: (u32, u32), script: &str) -> Child {
    c.node_command("setpriv")
        .args([
            &format!("--reuid={}", user.0),
            &format!("--regid={}", user.1),
            "--clear-groups",
            "--",
            "bash",
            "-c",
            script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Free inodes of the node's `run_dir`.
fn run_dir_free_inodes(c: &Cluster) -> u64 {
    let out = c
        .node_command("stat")
        .args(["-f", "-c", "%d"])
        .arg(c.run_dir())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// One attack: the attacker's MPS job; once it runs, the attacker's holder `how` from a
/// login shell (in a user namespace of its own with a bind mount of the job's log
/// directory where `in_userns`); the job ends. Returns (holder pid, files it made, its
/// stderr handle).
fn attack(c: &Cluster, role: &str, how: &str, in_userns: bool) -> (u32, u64, Child) {
    let account = profile_account(c, role);
    let ids = ensure_user(&account);
    let user = as_user(&account);
    let tag = format!("{role}-{how}");
    let ready = c.jobs_dir().join(format!("{tag}-ready"));
    let go = c.jobs_dir().join(format!("{tag}-go"));
    let out = c.jobs_dir().join(format!("{tag}-out"));
    let mnt = c.jobs_dir().join(format!("{tag}-mnt"));
    for f in [&ready, &go, &out] {
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::create_dir(&mnt);
    std::os::unix::fs::chown(&mnt, Some(ids.0), Some(ids.1)).unwrap();
    std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o700)).unwrap();
    let id = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &user),
        &format!(
            r#"echo "$CUDA_MPS_LOG_DIRECTORY" >{ready}.tmp && mv {ready}.tmp {ready}
while [ ! -e {go} ]; do sleep 0.1; done
"#,
            ready = ready.display(),
            go = go.display()
        ),
    );
    c.wait_for_file(id, &ready);
    let log = std::fs::read_to_string(&ready).unwrap().trim().to_string();
    assert!(!log.is_empty(), "the job's log directory");
    let program = c.jobs_dir().join("holder.py");
    std::fs::write(&program, HOLDER).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = if in_userns {
        format!(
            "exec unshare -Urm sh -c 'mount --bind \"$1\" \"$2\" && exec python3 \"$0\" {how} \"$2\" \"$3\"' {} {log} {} {}",
            program.display(),
            mnt.display(),
            out.display()
        )
    } else {
        format!(
            "exec python3 {} {how} {log} {}",
            program.display(),
            out.display()
        )
    };
    let mut holder = login_shell(c, ids, &script);
    let (pid, made) = c.wait_until(&format!("the {how} holder to fill the job's tmpfs"), || {
        if let Ok(Some(status)) = holder.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut err);
            panic!("the holder ended ({status}): {err}");
        }
        let text = std::fs::read_to_string(&out).ok()?;
        let mut f = text.split_whitespace().map(|w| w.parse::<u64>().unwrap());
        Some((u32::try_from(f.next()?).unwrap(), f.next()?))
    });
    println!("{how} holder (user namespace: {in_userns}): {made} files in its job's tmpfs");
    for l in c
        .slurmd_log_tail(400)
        .lines()
        .filter(|l| l.contains("tmpfs"))
    {
        println!("slurmd: {l}");
    }
    std::fs::write(&go, "").unwrap();
    let end = wait_job_end(c, id);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(id));
    (pid, made, holder)
}

/// After an attack: run_dir has its inodes back (only root's entries were ever there),
/// and another user's MPS job runs.
fn next_job_is_served(c: &Cluster, free_before: u64) {
    assert!(
        run_dir_entries(c).is_empty(),
        "left in run_dir: {:?}",
        run_dir_entries(c)
    );
    assert_eq!(run_dir_free_inodes(c), free_before, "run_dir's inodes");
    let victim = as_user(VICTIM);
    let v = c.submit(
        &args(&["--colloc=mps", "--gres=gpu:1"], &victim),
        "echo RAN",
    );
    let end = wait_job_end(c, v);
    assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(v));
    assert!(c.job_out(v).contains("RAN"));
}

fn end_holder(mut holder: Child, pid: u32) {
    if pid_alive(pid) {
        super::kill(pid);
    }
    let _ = holder.kill();
    let _ = holder.wait();
}

/// Attack 1: a writer in a user namespace of its own, where it bind-mounted the job's log
/// directory, its working directory there (the walk up `..` from it stopped at the
/// mount). It is found by the device of its working directory and of its namespace's
/// mount, and killed; the job's tmpfs goes.
pub fn bind_mounted_writer(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=1m,nr_inodes=64,mode=0755");
    let free = run_dir_free_inodes(c);
    let (pid, made, holder) = attack(c, "holder", "write", true);
    assert!(made > 1000, "the holder made {made} files");
    let killed = !pid_alive(pid);
    end_holder(holder, pid);
    assert!(
        killed,
        "the writer {pid} in its own namespace survived the epilog"
    );
    next_job_is_served(c, free);
    assert_node_clean(c, &before);
}

/// Attack 2: files unlinked and kept open until the job's tmpfs has no inodes left, from
/// a user namespace with a bind mount of the log directory, then `chdir /`. Found by the
/// device of its open descriptors (and its namespace's mount), killed; run_dir never gave
/// an inode.
pub fn unlinked_open_files(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=1m,nr_inodes=64,mode=0755");
    let free = run_dir_free_inodes(c);
    let (pid, made, holder) = attack(c, "holder", "unlinked", true);
    assert!(made > 1000, "the holder made {made} files");
    let killed = !pid_alive(pid);
    end_holder(holder, pid);
    assert!(
        killed,
        "the holder {pid} of unlinked files survived the epilog"
    );
    next_job_is_served(c, free);
    assert_node_clean(c, &before);
}

/// Attack 3: no namespace; each unlinked file's descriptor is sent over a socket pair and
/// never received, then `chdir /`: `/proc/PID/fd` shows only sockets, and no interface
/// tells which file system a descriptor in flight is on. The holder survives the epilog
/// (SECURITY.md, Known limits), but what it keeps is its own detached tmpfs: run_dir has
/// all its inodes and the next job runs.
pub fn descriptors_in_flight(c: &Cluster) {
    let _whole = c.whole_gpus();
    let before = c.gpu_layout();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=1m,nr_inodes=64,mode=0755");
    let free = run_dir_free_inodes(c);
    let (pid, made, holder) = attack(c, "holder", "scm", false);
    assert!(made > 100, "the holder made {made} files");
    let alive = pid_alive(pid);
    println!("the SCM_RIGHTS holder {pid} after the epilog: alive = {alive}");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        next_job_is_served(c, free);
    }));
    end_holder(holder, pid);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert_node_clean(c, &before);
}

/// The attacker's program for [`full_mount_namespace`]: in a user and mount namespace of
/// its own whose mounts still receive from the node's (`--propagation unchanged`), mount
/// a tmpfs on `base` and fill the namespace with bind mounts up to `fs.mount-max`
/// (recursive binds double the count; about 20 calls), write "PID MOUNTS" to `out`, stay.
const MOUNT_FILLER: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
MS_BIND, MS_REC = 4096, 16384
base, out = sys.argv[1:3]
def tmpfs(at):
    os.makedirs(at, exist_ok=True)
    assert libc.mount(b"none", at.encode(), b"tmpfs", 0, None) == 0, os.strerror(ctypes.get_errno())
def rbind(src, dst):
    return libc.mount(src.encode(), dst.encode(), None, MS_BIND | MS_REC, None) == 0
tmpfs(base)
tmpfs(base + "/t")
for i in range(40):
    os.mkdir("%s/t/s%d" % (base, i))
os.mkdir(base + "/x")
i = 0
while rbind(base + "/t", "%s/t/s%d" % (base, i)):
    i += 1
n = 0
for k in range(i - 1, -1, -1):
    while True:
        d = "%s/x/%d" % (base, n)
        os.mkdir(d)
        n += 1
        if not rbind("%s/t/s%d" % (base, k), d):
            break
while True:
    d = "%s/x/%d" % (base, n)
    os.mkdir(d)
    n += 1
    if libc.mount(d.encode(), d.encode(), None, MS_BIND, None) != 0:
        break
with open(out + ".tmp", "w") as f:
    f.write("%d %d\n" % (os.getpid(), sum(1 for _ in open("/proc/self/mountinfo"))))
os.rename(out + ".tmp", out)
while True:
    time.sleep(1)
"#;

/// Red team 4: run_dir's mount is shared, as under systemd (`/`, and so `/run` and a
/// tmpfs `check-config --fix` mounts there, are shared). A user from a login shell makes a
/// user and mount namespace that still receives from it (`unshare -Urm --propagation
/// unchanged`) and fills it with bind mounts up to `fs.mount-max`. The kernel then refuses
/// every mount that would be copied there: before, each later MPS job of every user was
/// refused ("cannot mount a tmpfs on run_dir/job-N: No space left on device"). run_dir is
/// made a private mount by the prolog, so another user's job runs.
pub fn full_mount_namespace(c: &Cluster) {
    let _whole = c.whole_gpus();
    let _run = NodeMount::tmpfs(c, &c.run_dir(), "size=1m,nr_inodes=64,mode=0755");
    make_shared(c, &c.run_dir());
    fill_mounts_then_serve_a_job(c);
}

/// As [`full_mount_namespace`], with run_dir a plain directory on a shared `/` (the
/// default `/run/colloc` under systemd): the first MPS prolog binds run_dir on itself and
/// makes that mount private, before the user fills their namespace.
/// Simple profile only: job_container/tmpfs cannot join its jobs' namespaces once the
/// node's `/` is made shared after it started (its BasePath mounts were made private).
pub fn full_mount_namespace_plain_run_dir(c: &Cluster) {
    let _whole = c.whole_gpus();
    if c.profile() != Profile::Simple {
        println!("skipped: the node's / cannot be made shared under job_container/tmpfs here");
        return;
    }
    make_shared(c, Path::new("/"));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let first = c.submit(
            &args(&["--colloc=mps", "--gres=gpu:1"], &as_user(VICTIM)),
            "echo RAN",
        );
        let end = wait_job_end(c, first);
        assert_eq!(
            end.state,
            "COMPLETED",
            "{end:?}; stderr: {}",
            c.job_err(first)
        );
        fill_mounts_then_serve_a_job(c);
    }));
    // The node's namespace as it was: `/` private, run_dir no mount of its own.
    let _ = c
        .node_command("mount")
        .args(["--make-private", "/"])
        .status();
    let _ = c.node_command("umount").arg("-l").arg(c.run_dir()).status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn make_shared(c: &Cluster, at: &Path) {
    let shared = c
        .node_command("mount")
        .arg("--make-shared")
        .arg(at)
        .status()
        .unwrap();
    assert!(shared.success(), "mount --make-shared {}", at.display());
}

/// A user fills a mount namespace of their own that receives from the node's; another
/// user's MPS job is served, and the node is as before.
fn fill_mounts_then_serve_a_job(c: &Cluster) {
    let before = c.gpu_layout();
    let account = profile_account(c, "holder");
    let ids = ensure_user(&account);
    let out = c.jobs_dir().join("mount-filler-out");
    let base = c.jobs_dir().join("mount-filler-base");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::create_dir(&base);
    std::os::unix::fs::chown(&base, Some(ids.0), Some(ids.1)).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
    let program = c.jobs_dir().join("mount-filler.py");
    std::fs::write(&program, MOUNT_FILLER).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = format!(
        "cd / && exec unshare -Urm --propagation unchanged python3 {} {} {}",
        program.display(),
        base.display(),
        out.display()
    );
    let mut filler = login_shell(c, ids, &script);
    let (pid, mounts) = c.wait_until("the namespace to be full of mounts", || {
        if let Ok(Some(status)) = filler.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(filler.stderr.as_mut().unwrap(), &mut err);
            panic!("the mount filler ended ({status}): {err}");
        }
        let text = std::fs::read_to_string(&out).ok()?;
        let mut f = text.split_whitespace().map(|w| w.parse::<u64>().unwrap());
        Some((u32::try_from(f.next()?).unwrap(), f.next()?))
    });
    let max: u64 = std::fs::read_to_string("/proc/sys/fs/mount-max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    println!("the filler's namespace holds {mounts} mounts (fs.mount-max = {max})");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(mounts + 2 >= max, "{mounts} of {max} mounts: not full");
        let victim = as_user(VICTIM);
        let v = c.submit(
            &args(&["--colloc=mps", "--gres=gpu:1"], &victim),
            "echo RAN",
        );
        let end = wait_job_end(c, v);
        assert_eq!(end.state, "COMPLETED", "{end:?}; stderr: {}", c.job_err(v));
        assert!(c.job_out(v).contains("RAN"));
    }));
    end_holder(filler, pid);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert_node_clean(c, &before);
}
