//! Where a node's processes sit under the `production-v2` profile's cgroup v2, seen from
//! the test (outside the node's namespaces). Each node's slurmd runs in a cgroup
//! namespace rooted at `/colloc-v2-<tag>-<node>` (tests/slurm/cluster.sh), so the node
//! names its cgroups without that first part, and its mount namespace has the cgroup2
//! hierarchy, from that root, at `/sys/fs/cgroup`.

use std::path::Path;
use std::process::Command;

use crate::Node;

/// The unified cgroup (`0::` line) of `pid`, as this process's cgroup namespace shows it.
pub fn unified_cgroup(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

impl Node<'_> {
    /// The unified cgroup of `pid` as this node names it: without the node's own
    /// `/colloc-v2-…` root. `None` for a process outside the node's cgroup.
    pub fn cgroup2_of(&self, pid: u32) -> Option<String> {
        let path = unified_cgroup(pid)?;
        let rest = path.strip_prefix("/colloc-v2-")?;
        let (root, below) = rest.split_once('/').unwrap_or((rest, ""));
        root.ends_with(&format!("-{}", self.name()))
            .then(|| format!("/{below}"))
    }

    /// Job `id`'s cgroup on this node, as Slurm's `cgroup/v2` names it (one slurmd per
    /// node, Slurm built with `--enable-multiple-slurmd`: the scope carries the node's
    /// name).
    pub fn job_cgroup2(&self, id: u32) -> String {
        format!("/system.slice/{}_slurmstepd.scope/job_{id}", self.name())
    }

    /// `program` in the node's mount namespace and under its slurmd's root directory: the
    /// cgroup2 mount is in that namespace, and under a chroot (tests/slurm/slurm-root.sh)
    /// entering a mount namespace alone would leave the process at the namespace's own
    /// root, where `/sys/fs/cgroup` is another mount.
    fn in_node_root(&self, program: &str) -> Command {
        let pid = self
            .slurmd_pid()
            .unwrap_or_else(|| panic!("node {}'s slurmd does not run", self.name()));
        let mut c = Command::new("nsenter");
        c.arg(format!("--target={pid}"))
            .args(["--mount", "--root", "--"])
            .arg(program);
        c
    }

    /// Does the node have cgroup `path` (as it names it)?
    pub fn has_cgroup2(&self, path: &str) -> bool {
        let st = self
            .in_node_root("test")
            .arg("-e")
            .arg("/sys/fs/cgroup/cgroup.controllers")
            .status();
        assert!(
            st.is_ok_and(|s| s.success()),
            "node {}: no cgroup2 at /sys/fs/cgroup",
            self.name()
        );
        self.in_node_root("test")
            .arg("-d")
            .arg(format!("/sys/fs/cgroup{path}"))
            .status()
            .is_ok_and(|s| s.success())
    }

    /// How opening `dev` fails for a process in the node's cgroup `path`: "No such
    /// device or address" where Slurm's device program allows it (no driver serves the
    /// fake GPU), "Operation not permitted" where it denies it.
    pub fn open_in_cgroup2(&self, path: &str, dev: &Path) -> String {
        let out = self
            .in_node_root("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > /sys/fs/cgroup{path}/cgroup.procs 2>&1 && {{ exec 3<>{} ; }} 2>&1; true",
                dev.display()
            ))
            .output()
            .expect("sh in the node's namespace");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.rsplit(": ").next().unwrap_or("").trim().to_string()
    }
}
