//! The shape of a cluster to start: its Slurm configuration ([`Profile`]) and
//! [`ClusterSpec`].

/// The Slurm configuration a cluster runs (`cluster.sh start --profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `proctrack/linuxproc`, `task/none`, no cgroups, no job container,
    /// `PrologFlags=Alloc`: the simplest setup Slurm runs with.
    Simple,
    /// What university clusters run: `proctrack/cgroup`, `task/cgroup,task/affinity`,
    /// `jobacct_gather/cgroup`, `CR_Core_Memory`, cgroup v1 with
    /// `ConstrainCores/RAMSpace/Devices=yes`, `PrologFlags=Alloc,Contain` and
    /// `job_container/tmpfs` (each job has a private `/tmp` and `/dev/shm`). The cluster's
    /// folder is under `/var/tmp`, since the job container hides `/tmp` from jobs.
    Production,
    /// [`Profile::Production`] on Slurm's `cgroup/v2` (Slurm 23.02 or later: the 24.11
    /// root): `ConstrainDevices=yes` through Slurm's eBPF device program,
    /// `jobacct_gather/linux`, `ConstrainCores/RAMSpace=no` (this host keeps cpuset,
    /// memory and cpu in its v1 hierarchies), each node's slurmd in a cgroup and cgroup
    /// namespace of its own with cgroup2 at `/sys/fs/cgroup` (tests/slurm/cluster.sh).
    ProductionV2,
}

impl Profile {
    /// The name `cluster.sh --profile` and `COLLOC_CLUSTER_PROFILE` take.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Simple => "simple",
            Profile::Production => "production",
            Profile::ProductionV2 => "production-v2",
        }
    }

    /// A production profile (`PrologFlags=Contain`, cgroups, `job_container/tmpfs`),
    /// on either cgroup version.
    pub fn production(self) -> bool {
        matches!(self, Profile::Production | Profile::ProductionV2)
    }

    /// `COLLOC_CLUSTER_PROFILE` (`simple` when unset or empty).
    ///
    /// # Panics
    /// On another value, naming the valid ones.
    pub fn from_env() -> Profile {
        match std::env::var("COLLOC_CLUSTER_PROFILE").as_deref() {
            Err(_) | Ok("" | "simple") => Profile::Simple,
            Ok("production") => Profile::Production,
            Ok("production-v2") => Profile::ProductionV2,
            Ok(other) => {
                panic!("COLLOC_CLUSTER_PROFILE={other:?}: valid: simple, production, production-v2")
            }
        }
    }
}

/// The shape of a cluster to start: nodes, fake GPUs per node, their models, the profile,
/// further plugstack.conf lines, and whether Slurm's accounting records its jobs.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub(crate) nodes: u32,
    pub(crate) gpus: u32,
    pub(crate) models: Option<String>,
    pub(crate) profile: Profile,
    pub(crate) spank_extra: Vec<String>,
    pub(crate) prolog_flags: Option<String>,
    pub(crate) accounting: bool,
}

impl ClusterSpec {
    /// `nodes` nodes (1: one node named after this host; more: `n1..nN`) with `gpus` fake
    /// A100 40GB each, under the profile of `COLLOC_CLUSTER_PROFILE`.
    pub fn new(nodes: u32, gpus: u32) -> ClusterSpec {
        ClusterSpec {
            nodes,
            gpus,
            models: None,
            profile: Profile::from_env(),
            spank_extra: Vec::new(),
            prolog_flags: None,
            accounting: false,
        }
    }

    /// The profile this spec starts.
    pub fn profile_of(&self) -> Profile {
        self.profile
    }

    /// `PrologFlags` instead of the profile's (e.g. `Alloc,Contain,Serial`).
    #[must_use]
    pub fn prolog_flags(mut self, flags: &str) -> ClusterSpec {
        self.prolog_flags = Some(flags.to_string());
        self
    }

    /// One node's GPU models for the fake NVML (comma list, one per GPU).
    #[must_use]
    pub fn models(mut self, models: Option<&str>) -> ClusterSpec {
        self.models = models.map(str::to_string);
        self
    }

    /// Run this profile, whatever `COLLOC_CLUSTER_PROFILE` says.
    #[must_use]
    pub fn profile(mut self, profile: Profile) -> ClusterSpec {
        self.profile = profile;
        self
    }

    /// With Slurm's accounting (`cluster.sh start --accounting`): a MariaDB and a slurmdbd
    /// of the cluster's own, on loopback, and slurmctld's job records going there, without
    /// `AccountingStorageEnforce`: every job (of root and of the test accounts alike) is
    /// recorded, and [`Cluster::sacct`](crate::Cluster::sacct) and
    /// [`Cluster::wait_accounted`](crate::Cluster::wait_accounted) answer. The start takes
    /// about 2.5 s more.
    #[must_use]
    pub fn with_accounting(mut self) -> ClusterSpec {
        self.accounting = true;
        self
    }

    /// Whether this spec starts Slurm's accounting ([`ClusterSpec::with_accounting`]).
    pub fn accounting(&self) -> bool {
        self.accounting
    }

    /// Add a plugstack.conf line after colloc's (e.g. a probe plugin).
    #[must_use]
    pub fn spank_line(mut self, line: &str) -> ClusterSpec {
        self.spank_extra.push(line.to_string());
        self
    }
}
