#!/bin/bash
# A real Slurm cluster on this machine, with fake GPUs, for colloc's tests, the demo and the
# benchmarks: one node (as a small site has it) or several nodes on this one host, with the
# simplest Slurm setup or the one university clusters run. Needs root (slurmd, mknod, mount
# namespaces, cgroups).
#
#   cluster.sh deps                     install the Debian packages that are missing
#   cluster.sh start DIR [--nodes N] [--gpus G] [--profile simple|production|production-v2]
#                        [--accounting]
#                                       write configs under DIR and start munged, slurmctld
#                                       and one slurmd per node; with --accounting also a
#                                       MariaDB and slurmdbd of the cluster's own, on
#                                       loopback, so that sacct and sacctmgr work
#                                       (tests/slurm/accounting.sh)
#   cluster.sh stop DIR                 wait for jobs and every node's epilogs, stop the
#                                       slurmds, slurmctld, slurmdbd and MariaDB, munged
#   cluster.sh env DIR [--node NODE]    print `export` lines: SLURM_CONF, COLLOC_CONFIG and
#                                       the fake NVML state (NODE's as seen from outside)
#   cluster.sh exec DIR --node NODE -- CMD [ARGS...]
#                                       run CMD inside NODE's mount namespace, where NODE's
#                                       own fake GPUs, journals and MPS folders are
#   cluster.sh nodes DIR                print the node names, one a line
#   cluster.sh node-crash DIR NODE      take NODE away as a power cut would: SIGKILL its
#                                       slurmd and every process of its jobs (slurmstepd,
#                                       tasks, daemons the prolog started); no epilog runs
#   cluster.sh node-start DIR NODE      start NODE's slurmd again (after node-crash)
#   cluster.sh reset-gpus DIR           fresh fake GPUs on every node (COLLOC_FAKE_NVML_CTL)
#
# start reads (all optional; the flags win over the variables):
#   COLLOC_CLUSTER_NODES   number of nodes (default 1). One node is named after this host
#                          (`hostname -s`), exactly as a one-node site has it. Two or more
#                          are n1..nN, all on this host: one slurmd each (`slurmd -N nK`,
#                          its own port, `%n` in its spool, pid and log paths), each in its
#                          own mount namespace with its own fake GPUs (see below).
#   COLLOC_CLUSTER_GPUS    fake GPUs per node (default 1): device files (char 195:N) in
#                          gres.conf, Gres=gpu:N on each node
#   COLLOC_CLUSTER_PROFILE simple (default), production or production-v2:
#     simple      proctrack/linuxproc, task/none, no cgroup.conf, no job container,
#                 PrologFlags=Alloc.
#     production  what university clusters run: proctrack/cgroup, task/cgroup,task/affinity,
#                 jobacct_gather/cgroup, CR_Core_Memory, cgroup.conf (cgroup/v1,
#                 IgnoreSystemd, ConstrainCores/RAMSpace/Devices=yes), PrologFlags=Alloc,
#                 Contain, JobContainerType=job_container/tmpfs (private /tmp and /dev/shm
#                 per job). DIR must then lie outside /tmp: the job container hides /tmp,
#                 and colloc.toml's paths, the job scripts and the fake GPU state must stay
#                 visible inside jobs. Each slurmd's mount namespace is made on CPU 0
#                 (`taskset -c 0`): on this kind of VM the job container's namespace
#                 cannot be pinned ("ns base mount failed: Invalid argument") when its
#                 parent namespace was made on another CPU.
#     production-v2  production on Slurm's cgroup/v2 (needs Slurm 23.02 or later: the
#                 24.11 root of tests/slurm): cgroup.conf CgroupPlugin=cgroup/v2,
#                 IgnoreSystemd, ConstrainDevices=yes (Slurm's eBPF device program),
#                 jobacct_gather/linux, ConstrainCores/RAMSpace=no: a host that mounts v1
#                 hierarchies keeps cpuset, memory and cpu there, and v2 offers them to no
#                 one (jobacct_gather/cgroup needs memory and cpu; Slurm stops without
#                 them). Each node's slurmd runs in a cgroup of its own,
#                 /colloc-v2-<tag>-<node> right under the cgroup2 root, and in a cgroup
#                 namespace rooted there, with cgroup2 mounted at /sys/fs/cgroup in its
#                 mount namespace: Slurm makes its system.slice/<node>_slurmstepd.scope/
#                 job_<id>/… there, apart from other clusters. stop kills what is left in
#                 it (cgroup.kill) and removes it. One level deep, because Slurm finds the
#                 cgroup root from /proc/1/cgroup (PID 1 lies outside the namespace: its
#                 path reads /.., whose parent is the mount). Where /proc/self/cgroup lists
#                 v1 hierarchies too (this kind of host), Slurm refuses to run ("Hybrid
#                 mode is not supported") however the namespace mounts them: slurmd then
#                 runs with the preload tests/slurm/cgroup2/unified_only.c (built here
#                 with $CC, else gcc; COLLOC_CGROUP2_PRELOAD gives a built one), which
#                 shows Slurm only the unified line of /proc/PID/cgroup, as such a node
#                 has it. Everything else is the kernel's.
#   COLLOC_CLUSTER_PROLOG_FLAGS  PrologFlags instead of the profile's (e.g. Alloc,Contain,Serial)
#   COLLOC_FAKE_NVML_GPUS  models of one node's GPUs for the fake NVML (default A100-40GB
#                          for each)
#   COLLOC_SPANK_PLUGIN    the plugin to load (default target/debug/libcolloc_spank.so);
#                          "none" leaves plugstack.conf empty
#   COLLOC_SPANK_EXTRA     further plugstack.conf lines (e.g. a probe plugin), appended;
#                          @DIR@ in them stands for the cluster's folder
#   COLLOC_FAKE_NVML_LIB   the fake libnvidia-ml (default target/debug/libfake_nvml.so)
#   COLLOC_FAKE_NVML_CTL   its control tool (default target/debug/fake-nvml-ctl)
#   COLLOC_MPS_CONTROL     the MPS control program (default tests/fake-mps/nvidia-cuda-mps-control)
#   COLLOC_CLUSTER_NO_NAMESPACE=1  one simple node without a mount namespace (see below)
#
# Fake GPU state. The fake NVML keeps its state in a JSON file. The job prolog runs with an
# almost empty environment (no COLLOC_FAKE_NVML_STATE reaches it), so each slurmd runs in
# its own mount namespace where the node's state folder is mounted on the fake's default
# folder /run/colloc-fake-nvml: prolog, epilog and jobs see this node's state, nothing else
# on the machine is touched. Not under /tmp: job_container/tmpfs gives a job its own /tmp,
# and an epilog that starts while the extern step still tears the container down joins it
# (seen in CI: the fake then read the dying container's /tmp and answered UNKNOWN). Jobs get COLLOC_FAKE_NVML_STATE=DIR/fake-nvml/state.json from
# `cluster.sh env` (the job container hides /tmp in jobs, not DIR). One node: the state is
# DIR/fake-nvml/state.json. Several nodes: node nK's is DIR/nodes/nK/fake-nvml/state.json,
# and inside nK's namespace DIR/fake-nvml, DIR/state (colloc's journals) and DIR/run
# (colloc's MPS folders) are nK's own DIR/nodes/nK/{fake-nvml,state,run}, as each real node
# has its own /var/lib/colloc and /run/colloc under the one colloc.toml. Where namespaces
# are not allowed (one simple node only), the default folder itself is used, and the state
# is copied back and forth at start and stop.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
DEFAULT_FAKE_DIR=/run/colloc-fake-nvml
# shellcheck source=accounting.sh
source "$here/accounting.sh"
PACKAGES=(slurmctld slurmd slurm-client munge libslurm-dev libclang1-14 libclang-common-14-dev
  "${ACCOUNTING_PACKAGES[@]}")
USAGE="usage: cluster.sh deps | start DIR [--nodes N] [--gpus G] [--profile simple|production|production-v2]
         [--accounting]
       | stop DIR | env DIR [--node NODE] | exec DIR --node NODE -- CMD... | nodes DIR
       | node-crash DIR NODE | node-start DIR NODE | reset-gpus DIR"

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { echo "$USAGE" >&2; exit 2; }
bad() { echo "cluster.sh: $*" >&2; exit 2; }
log() { echo "cluster.sh: $*" >&2; }

# Wait up to $1 tenths of a second for the command "${@:2}" to succeed.
wait_for() {
  local tenths=$1; shift
  for ((i = 0; i < tenths; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # No system daemon may start from this (slurmdbd's postinst starts Debian's own through
    # invoke-rc.d): where the machine has no policy-rc.d, one that refuses every start.
    local made_policy= rc=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
      chmod 755 /usr/sbin/policy-rc.d
      made_policy=1
    fi
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    [[ -z $made_policy ]] || rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || die "apt-get install ${missing[*]} failed"
  fi
}

# Set $port to a TCP port nothing listens on and this cluster has not taken yet, below
# Linux's ephemeral range (32768 and up), so no client's port can take it meanwhile.
taken=" "
next_port() {
  local p
  for _ in $(seq 50); do
    p=$((10000 + RANDOM % 22000))
    [[ $taken == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      taken+="$p "
      port=$p
      return
    fi
  done
  die "no free TCP port found"
}

# The cluster's shape, written by start into DIR/cluster.info and read back by the rest.
load_info() {
  local dir=$1
  [[ -f $dir/cluster.info ]] || die "$dir has no cluster (cluster.sh start $dir)"
  # shellcheck disable=SC1091 # written by start
  source "$dir/cluster.info"
}

# Is $1 one of this cluster's several nodes (n1..nN)?
check_node() {
  local n
  for n in $NODE_NAMES; do [[ $n == "$1" ]] && return 0; done
  die "no node $1 in this cluster (nodes: $NODE_NAMES)"
}

# The pid file of node $2's slurmd.
pid_file() { if ((NODES == 1)); then echo "$1/slurm/slurmd.pid"; else echo "$1/slurm/slurmd-$2.pid"; fi; }

# The mount namespace (ns/mnt link text) of node $2's slurmd, empty if it does not run.
node_ns() {
  local pid
  pid=$(cat "$(pid_file "$1" "$2")" 2>/dev/null || true)
  [[ $pid =~ ^[0-9]+$ ]] && readlink "/proc/$pid/ns/mnt" 2>/dev/null || true
}

write_configs() {
  local dir=$1 host=$2 gpus=$3 profile=$4 plugin=$5 fake_lib=$6 mps=$7
  local port ctld_port nodes_conf="" gres="" cpus mem=1000
  # Every processor of the machine, whatever this process may run on (scripts/test.sh runs
  # each lane on one: `nproc` would then give 1, and jobs meant to run side by side queue).
  cpus=$(nproc --all)
  next_port
  ctld_port=$port
  local n i devdir
  for n in $NODE_NAMES; do
    if ((NODES == 1)); then devdir=$dir/dev; else devdir=$dir/nodes/$n/dev; fi
    for ((i = 0; i < gpus; i++)); do
      mknod "$devdir/fakegpu$i" c 195 "$i"
      gres+="NodeName=$n Name=gpu File=$devdir/fakegpu$i"$'\n'
    done
    if ((NODES == 1)); then
      nodes_conf+="NodeName=$n NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN"$'\n'
    else
      next_port
      nodes_conf+="NodeName=$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$port CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN"$'\n'
    fi
  done
  printf '%s' "$gres" >"$dir/etc/gres.conf"

  local per_node="" slurmd_port=""
  if ((NODES == 1)); then
    next_port
    slurmd_port="SlurmdPort=$port"
    per_node="SlurmdSpoolDir=$dir/slurm/spool
SlurmdPidFile=$dir/slurm/slurmd.pid
SlurmdLogFile=$dir/slurm/slurmd.log"
  else
    # A node that went away is marked down within about 15 s (measured here; SlurmdTimeout
    # plus the failed pings' retries within MessageTimeout), not after the default 5 min.
    per_node="SlurmdSpoolDir=$dir/slurm/spool-%n
SlurmdPidFile=$dir/slurm/slurmd-%n.pid
SlurmdLogFile=$dir/slurm/slurmd-%n.log
SlurmdTimeout=6
MessageTimeout=5"
  fi

  # Concurrent clusters on this host share the cgroup tree /slurm_<node>/uid_*/job_<id>
  # and the abstract socket names of `colloc run`'s live metrics (colloc-live/<job>/…):
  # job ids from a random start keep their jobs apart (a simple cluster's job 15 once
  # counted another simple cluster's job 15 sockets as refused).
  local first_job=$((1000 + (RANDOM * 32768 + RANDOM) % 50000000))
  local plugins
  if [[ $profile == production* ]]; then
    plugins="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=$([[ $profile == production-v2 ]] && echo jobacct_gather/linux || echo jobacct_gather/cgroup)
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((mem / cpus))
PrologFlags=${COLLOC_CLUSTER_PROLOG_FLAGS:-Alloc,Contain}
JobContainerType=job_container/tmpfs
FirstJobId=$first_job"
    if [[ $profile == production-v2 ]]; then
      cat >"$dir/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=yes
EOF
    else
      cat >"$dir/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
IgnoreSystemd=yes
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainDevices=yes
EOF
    fi
    # Slurm built with --enable-multiple-slurmd (Debian's is) adds /<node name> to BasePath.
    cat >"$dir/etc/job_container.conf" <<EOF
AutoBasePath=true
BasePath=$dir/slurm/job-containers
EOF
  else
    plugins="ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectTypeParameters=CR_Core
PrologFlags=${COLLOC_CLUSTER_PROLOG_FLAGS:-Alloc}
FirstJobId=$first_job"
  fi

  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=colloc-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
${slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
MailProg=/bin/true
${ACCOUNTING_SLURM_CONF:-AccountingStorageType=accounting_storage/none}
SelectType=select/cons_tres
${plugins}
ReturnToService=2
PrologEpilogTimeout=120
KillWait=5
# Slurm's default: with 2 s a test's poll slowed by load could find a job forgotten
# before it saw the job end.
MinJobAge=300
InactiveLimit=0
StateSaveLocation=$dir/slurm/state
SlurmctldPidFile=$dir/slurm/slurmctld.pid
SlurmctldLogFile=$dir/slurm/slurmctld.log
${per_node}
SlurmdDebug=debug
PlugStackConfig=$dir/etc/plugstack.conf
GresTypes=gpu
${nodes_conf}PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

  cat >"$dir/etc/colloc.toml" <<EOF
version = 1
allowed_modes = ["naive", "mps", "mig"]
default_mode = "off"
state_dir = "$dir/state"
run_dir = "$dir/run"
nvml_library = "$fake_lib"
mps_control = "$mps"
allow_mig_mode_change = false

# The fake driver publishes its MIG capability tree beside its state file; colloc makes
# the instances' device files in a folder of the cluster's (issue 24).
[mig]
caps_dev_dir = "$dir/dev/nvidia-caps"
caps_proc_dir = "$dir/fake-nvml/proc/driver/nvidia/capabilities"
mig_minors = "$dir/fake-nvml/proc/driver/nvidia-caps/mig-minors"
proc_devices = "$dir/fake-nvml/proc/devices"
nvidia_modprobe = "$dir/no-nvidia-modprobe"
EOF

  if [[ $plugin == none ]]; then
    : >"$dir/etc/plugstack.conf"
  else
    echo "required $plugin config=$dir/etc/colloc.toml" >"$dir/etc/plugstack.conf"
  fi
  if [[ -n ${COLLOC_SPANK_EXTRA:-} ]]; then
    printf '%s\n' "${COLLOC_SPANK_EXTRA//@DIR@/$dir}" >>"$dir/etc/plugstack.conf"
  fi
}

# Write fresh fake GPU states for every node of the cluster in $1 (with the control tool $2).
init_fake_gpus() {
  local dir=$1 fake_ctl=$2 n k=0 state
  for n in $NODE_NAMES; do
    k=$((k + 1))
    if ((NODES == 1)); then state=$dir/fake-nvml/state.json; else state=$dir/nodes/$n/fake-nvml/state.json; fi
    "$fake_ctl" --state "$state" init --gpus "$MODELS" >/dev/null
    echo "$MODELS" >"$(dirname "$state")/models"
    if ((NODES > 1)); then
      # The fake derives GPU UUIDs from model and index alone, and MIG UUIDs from the
      # GPU's: the node's number in each GPU UUID's last byte gives every node its own, as
      # real nodes have.
      sed -i -E "s/(\"uuid\": *\"GPU-[0-9a-f-]{34})[0-9a-f]{2}\"/\1$(printf %02x "$k")\"/" "$state"
    fi
    chmod -R a+rwX "$(dirname "$state")"
  done
}

reset_gpus() {
  local dir
  dir=$(cd "$1" && pwd)
  load_info "$dir"
  init_fake_gpus "$dir" "${COLLOC_FAKE_NVML_CTL:-$root/target/debug/fake-nvml-ctl}"
}

# production-v2: check that this Slurm has cgroup/v2 and that cgroup2 mounts here, pick
# the cluster's cgroup tag, and make the preload where /proc/self/cgroup lists v1
# hierarchies (see the top of this file). Sets CGROUP_TAG and CGROUP2_PRELOAD.
cgroup2_setup() {
  local dir=$1 version
  version=$(slurmd -V | awk '{print $2}')
  [[ ${version%%.*} -ge 23 ]] ||
    bad "--profile production-v2 needs Slurm 23.02 or later (cgroup/v2 refuses this host's hybrid hierarchy before; slurmd here is $version): run it in the Slurm 24.11 root of tests/slurm"
  unshare -m --propagation private sh -c 'mount -t cgroup2 none /sys/fs/cgroup' ||
    die "--profile production-v2: cgroup2 does not mount here (mount -t cgroup2)"
  CGROUP_TAG=$(printf '%04x%04x' "$RANDOM" "$RANDOM")
  if grep -qv '^0::' /proc/self/cgroup; then
    CGROUP2_PRELOAD=${COLLOC_CGROUP2_PRELOAD:-}
    if [[ -z $CGROUP2_PRELOAD ]]; then
      CGROUP2_PRELOAD=$dir/bin/unified_only.so
      mkdir -p "$dir/bin"
      "${CC:-gcc}" -O2 -Wall -shared -fPIC -o "$CGROUP2_PRELOAD" "$here/cgroup2/unified_only.c" -ldl ||
        die "--profile production-v2: cannot build $here/cgroup2/unified_only.c (set CC, or COLLOC_CGROUP2_PRELOAD to a built one)"
    fi
    [[ -f $CGROUP2_PRELOAD ]] || die "no preload at $CGROUP2_PRELOAD (COLLOC_CGROUP2_PRELOAD)"
  fi
}

# production-v2: kill what is left in the nodes' cgroups ($2: one node, else all) and
# remove them, deepest first.
cgroup2_remove() {
  local dir=$1 only=${2:-}
  [[ -n ${CGROUP_TAG:-} ]] || return 0
  unshare -m --propagation private sh -c '
    mount -t cgroup2 none /sys/fs/cgroup || exit 0
    for cg in /sys/fs/cgroup/colloc-v2-$0-${1:-*}; do
      [ -d "$cg" ] || continue
      echo 1 >"$cg/cgroup.kill" 2>/dev/null
      for _ in $(seq 50); do
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
        [ -d "$cg" ] || break
        sleep 0.1
      done
      [ -d "$cg" ] && echo "cluster.sh: $cg stays" >&2
    done
    exit 0' "$CGROUP_TAG" "$only"
}

# Start node $2's slurmd in a mount namespace of its own (see the top of this file).
start_slurmd() {
  local dir=$1 n=$2 binds
  if ((NODES == 1)); then
    binds="mount --bind '$dir/fake-nvml' '$DEFAULT_FAKE_DIR'"
  else
    local own=$dir/nodes/$n
    binds="mount --bind '$own/fake-nvml' '$DEFAULT_FAKE_DIR' && mount --bind '$own/fake-nvml' '$dir/fake-nvml' \
&& mount --bind '$own/state' '$dir/state' && mount --bind '$own/run' '$dir/run'"
  fi
  if [[ $PROFILE == production-v2 ]]; then
    local cpus cg preload=
    cpus=$(taskset -pc $$ | sed 's/.*: //')
    cg=/sys/fs/cgroup/colloc-v2-$CGROUP_TAG-$n
    [[ -n ${CGROUP2_PRELOAD:-} ]] && preload="LD_PRELOAD='$CGROUP2_PRELOAD'"
    # Into the node's own cgroup (made on the cgroup2 root, mounted here only), then a
    # cgroup namespace rooted there whose own cgroup2 mount is what Slurm sees.
    taskset -c 0 unshare -m --propagation private sh -c \
      "$binds && mount -t cgroup2 none /sys/fs/cgroup && mkdir -p '$cg' && echo \$\$ >'$cg/cgroup.procs' \
&& exec unshare -C sh -c \"umount /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup \
&& exec env $preload taskset -c '$cpus' slurmd -N '$n'\""
  elif [[ $PROFILE == production ]]; then
    # The namespace is made on CPU 0; slurmd itself then runs where it would have.
    local cpus
    cpus=$(taskset -pc $$ | sed 's/.*: //')
    taskset -c 0 unshare -m --propagation private sh -c \
      "$binds && exec taskset -c '$cpus' slurmd -N '$n'"
  else
    unshare -m --propagation private sh -c "$binds && exec slurmd -N '$n'"
  fi
}

start() {
  local dir=$1
  [[ $(id -u) == 0 ]] || die "needs root (slurmd, mknod, mount)"
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null ||
    { [[ -n $opt_accounting ]] && ! accounting_have_programs; }; then
    deps
  fi
  local nodes=${opt_nodes:-${COLLOC_CLUSTER_NODES:-1}}
  local gpus=${opt_gpus:-${COLLOC_CLUSTER_GPUS:-1}}
  local profile=${opt_profile:-${COLLOC_CLUSTER_PROFILE:-simple}}
  [[ $nodes =~ ^([1-9]|1[0-6])$ ]] || bad "--nodes $nodes (COLLOC_CLUSTER_NODES): give 1 to 16"
  [[ $gpus =~ ^[1-8]$ ]] || bad "--gpus $gpus (COLLOC_CLUSTER_GPUS): give 1 to 8"
  [[ $profile == simple || $profile == production || $profile == production-v2 ]] ||
    bad "--profile $profile (COLLOC_CLUSTER_PROFILE): valid: simple, production, production-v2"
  local models=${COLLOC_FAKE_NVML_GPUS:-}
  if [[ -z $models ]]; then
    models=A100-40GB
    for ((i = 1; i < gpus; i++)); do models+=,A100-40GB; done
  fi
  local plugin=${COLLOC_SPANK_PLUGIN:-$root/target/debug/libcolloc_spank.so}
  local fake_lib=${COLLOC_FAKE_NVML_LIB:-$root/target/debug/libfake_nvml.so}
  local fake_ctl=${COLLOC_FAKE_NVML_CTL:-$root/target/debug/fake-nvml-ctl}
  local mps=${COLLOC_MPS_CONTROL:-$root/tests/fake-mps/nvidia-cuda-mps-control}
  if [[ $plugin != none ]]; then
    [[ -f $plugin ]] || die "no plugin at $plugin (cargo build -p colloc-spank, or set COLLOC_SPANK_PLUGIN)"
  fi
  [[ -f $fake_lib ]] || die "no fake NVML at $fake_lib (cargo build -p fake-nvml)"
  [[ -x $fake_ctl ]] || die "no fake-nvml-ctl at $fake_ctl (cargo build -p fake-nvml)"

  dir=$(realpath -m "$dir")
  if [[ $profile == production* && ($dir == /tmp || $dir == /tmp/* || $dir == /dev/shm || $dir == /dev/shm/*) ]]; then
    bad "--profile $profile: $dir is inside /tmp, which job_container/tmpfs makes private to each job; give a folder outside /tmp and /dev/shm (e.g. under /var/tmp)"
  fi
  local namespaces=1
  if [[ -n ${COLLOC_CLUSTER_NO_NAMESPACE:-} ]] || ! unshare -m --propagation private true 2>/dev/null; then
    namespaces=
    ((nodes == 1)) && [[ $profile == simple ]] ||
      die "several nodes and the production profile need mount namespaces (unshare -m)"
  fi
  mkdir -p "$dir"
  compgen -G "$dir/slurm/slurmd*.pid" >/dev/null && die "$dir already has a running cluster (cluster.sh stop $dir)"
  rm -rf "${dir:?}/etc" "${dir:?}/slurm" "${dir:?}/dev" "${dir:?}/state" "${dir:?}/run" \
    "${dir:?}/fake-nvml" "${dir:?}/nodes" "${dir:?}/cluster.info" "${dir:?}/bin" \
    "${dir:?}/mariadb" "${dir:?}/slurmdbd"
  if [[ $profile == production* ]]; then
    # The job container hides /tmp and /dev/shm, and colloc refuses jobs on a node whose
    # colloc.toml names files there: a checkout under /tmp (a clone there) must not be
    # where colloc.toml points. The stand-ins are copied into the cluster's folder.
    local var src
    for var in fake_lib mps; do
      src=$(realpath -m "${!var}")
      case $src in
        /tmp/* | /dev/shm/*)
          install -D -m 0755 "$src" "$dir/bin/$(basename "$src")"
          printf -v "$var" '%s' "$dir/bin/$(basename "$src")"
          ;;
      esac
    done
  fi
  mkdir -p "$dir/etc" "$dir/slurm/state" "$dir/slurm/spool" "$dir/dev" "$dir/state" "$dir/run" "$dir/fake-nvml" "$dir/jobs"
  chmod 1777 "$dir/jobs"
  # Jobs run as other users in some tests: let them reach their output folder.
  chmod 755 "$dir"

  local host
  host=$(hostname -s)
  NODES=$nodes
  PROFILE=$profile
  MODELS=$models
  if ((nodes == 1)); then
    NODE_NAMES=$host
  else
    NODE_NAMES=$(seq -f 'n%g' -s ' ' 1 "$nodes")
  fi
  local n
  for n in $NODE_NAMES; do
    ((nodes == 1)) && break
    mkdir -p "$dir/nodes/$n/dev" "$dir/nodes/$n/fake-nvml" "$dir/nodes/$n/state" "$dir/nodes/$n/run" \
      "$dir/slurm/spool-$n"
  done
  CGROUP_TAG= CGROUP2_PRELOAD=
  [[ $profile == production-v2 ]] && cgroup2_setup "$dir"
  cat >"$dir/cluster.info" <<EOF
NODES=$nodes
NODE_NAMES="$NODE_NAMES"
GPUS=$gpus
PROFILE=$profile
MODELS=$models
CGROUP_TAG=$CGROUP_TAG
CGROUP2_PRELOAD=$CGROUP2_PRELOAD
ACCOUNTING=$opt_accounting
EOF
  ACCOUNTING_SLURM_CONF=
  [[ -z $opt_accounting ]] || accounting_configure "$dir"
  write_configs "$dir" "$host" "$gpus" "$profile" "$plugin" "$fake_lib" "$mps"

  init_fake_gpus "$dir" "$fake_ctl"
  chmod -R a+rwX "$dir/fake-nvml"

  export SLURM_CONF=$dir/etc/slurm.conf

  # A munged of this cluster's own, on its own socket (slurm.conf's AuthInfo): clusters
  # started at once (CI runs two profiles side by side) never race to start, or stop,
  # one shared munged, and a munged the machine already runs is left alone.
  install -d -o munge -g munge -m 0755 "$dir/munge"
  runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" ||
    die "munged did not start (see $dir/munge/munged.log)"
  wait_for 50 sh -c 'munge -S "$0" -n | unmunge -S "$0"' "$dir/munge/munge.socket" ||
    die "munged did not answer on $dir/munge/munge.socket (see $dir/munge/munged.log)"

  [[ -z $opt_accounting ]] || accounting_start "$dir"

  slurmctld -c
  wait_for 100 sh -c 'scontrol ping | grep -q UP' || die "slurmctld did not come up (see $dir/slurm/slurmctld.log)"
  [[ -z $opt_accounting ]] || accounting_wait_registered "$dir"

  mkdir -p "$DEFAULT_FAKE_DIR"
  if [[ -n $namespaces ]]; then
    for n in $NODE_NAMES; do start_slurmd "$dir" "$n"; done
  else
    log "no mount namespace here: the fake NVML state lives in $DEFAULT_FAKE_DIR for this cluster"
    touch "$dir/fake-nvml/shared-default"
    cp "$dir/fake-nvml/state.json" "$DEFAULT_FAKE_DIR/state.json"
    rm -f "$dir/fake-nvml/state.json"
    ln -s "$DEFAULT_FAKE_DIR/state.json" "$dir/fake-nvml/state.json"
    slurmd
  fi
  # shellcheck disable=SC2016 # expanded by that sh, at each try
  wait_for 150 sh -c '[ "$(sinfo -h -N -o %T | grep -cx idle)" = "$0" ]' "$nodes" ||
    die "slurmd did not come up idle: $(sinfo -h -N -o '%N %T %E' 2>&1 | paste -sd';') (see $dir/slurm/slurmd*.log)"
}

# Stop the daemon of pid file $1 (SIGTERM, SIGKILL after 20 s) and remove the file.
stop_daemon() {
  local f=$1 pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if [[ $pid =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null; then
    wait_for 200 sh -c "! kill -0 $pid" || {
      log "$(basename "$f" .pid) $pid did not stop; killing it"
      kill -9 "$pid" 2>/dev/null || true
    }
  fi
  rm -f "$f"
}

# Kill every slurmctld and slurmd still running with cluster $1's SLURM_CONF. On 23.11
# and later `scontrol reconfigure` starts a new slurmctld (and slurmd) in place of the
# old, which writes its pid file when it is up: a stop that read the file meanwhile
# stopped the old one only (seen after CI: a 24.11 slurmctld and its slurmscriptd
# outlived their cluster's folder).
sweep_daemons() {
  local conf="SLURM_CONF=$1/etc/slurm.conf" p comm
  for p in /proc/[0-9]*; do
    # The name first (read by the shell itself: no process per entry of /proc).
    comm=
    read -r comm <"$p/comm" 2>/dev/null || continue
    case $comm in
      slurmctld* | slurmscriptd | slurmd | slurmd-*) ;;
      *) continue ;;
    esac
    if tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "$conf"; then
      log "$comm ${p#/proc/} still ran after the stop: killed"
      kill -9 "${p#/proc/}" 2>/dev/null || true
    fi
  done
}

stop() {
  local dir
  dir=$(cd "$1" && pwd)
  [[ -f $dir/cluster.info ]] && load_info "$dir"
  export SLURM_CONF=$dir/etc/slurm.conf
  if [[ -f $dir/slurm/slurmctld.pid ]] && scontrol ping 2>/dev/null | grep -q UP; then
    scancel --full "--user=$(id -un)" >/dev/null 2>&1 || true
    squeue -h -o %i | xargs -r scancel >/dev/null 2>&1 || true
    # Epilogs restore the GPUs: let every node's finish before its slurmd goes.
    # shellcheck disable=SC2016 # expanded by that sh, at each try
    wait_for 300 sh -c '[ -z "$(squeue -h)" ] && ! sinfo -h -N -o %T | grep -qE "comp|mix|alloc"' ||
      log "jobs still finishing: $(squeue -h 2>&1 | head -3)"
  fi
  # All slurmds at once (each takes a second or two to go), then slurmctld: killing
  # slurmctld first makes a slurmd hang for seconds.
  local f pid
  for f in "$dir"/slurm/slurmd*.pid; do stop_daemon "$f" & done
  wait
  stop_daemon "$dir/slurm/slurmctld.pid"
  sweep_daemons "$dir"
  accounting_stop "$dir"
  stop_daemon "$dir/munge/munged.pid"
  [[ ${PROFILE:-} == production-v2 ]] && cgroup2_remove "$dir"
  if [[ -f $dir/fake-nvml/shared-default ]]; then
    rm -f "$dir/fake-nvml/state.json" "$dir/fake-nvml/shared-default"
    mv "$DEFAULT_FAKE_DIR/state.json" "$dir/fake-nvml/state.json" 2>/dev/null || true
  fi
}

print_env() {
  local dir=$1 node=$2
  dir=$(cd "$dir" && pwd)
  load_info "$dir"
  echo "export SLURM_CONF=$dir/etc/slurm.conf"
  echo "export COLLOC_CONFIG=$dir/etc/colloc.toml"
  if [[ -n $node ]] && ((NODES > 1)); then
    check_node "$node"
    echo "export COLLOC_FAKE_NVML_STATE=$dir/nodes/$node/fake-nvml/state.json"
  else
    # Inside each node's namespace this path is that node's own state, so jobs
    # submitted with it read their node's GPUs.
    echo "export COLLOC_FAKE_NVML_STATE=$dir/fake-nvml/state.json"
  fi
}

exec_in() {
  local dir=$1 node=$2
  shift 2
  dir=$(cd "$dir" && pwd)
  load_info "$dir"
  [[ -n $node ]] || node=${NODE_NAMES%% *}
  ((NODES == 1)) && [[ $node != "$NODE_NAMES" ]] && die "no node $node in this cluster (nodes: $NODE_NAMES)"
  check_node "$node"
  local pid
  pid=$(cat "$(pid_file "$dir" "$node")" 2>/dev/null || true)
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || die "node $node's slurmd does not run"
  SLURM_CONF=$dir/etc/slurm.conf COLLOC_CONFIG=$dir/etc/colloc.toml \
    COLLOC_FAKE_NVML_STATE=$dir/fake-nvml/state.json \
    exec nsenter "--mount=/proc/$pid/ns/mnt" -- "$@"
}

# Every process of node $2: those in its slurmd's mount namespace (slurmd, slurmstepd,
# prolog and epilog, daemons the prolog started; with job_container/tmpfs not the tasks)
# and those in the cgroups of this cluster's jobs on it (/slurm_<node>/uid_*/job_<id>/…:
# the tasks, in their job's namespace). Other clusters on this host may have a node of
# the same name, but not the same job ids (FirstJobId is random, in every profile).
node_pids() {
  local dir=$1 n=$2 ns p jobs
  ns=$(node_ns "$dir" "$n")
  jobs=$(SLURM_CONF=$dir/etc/slurm.conf squeue -h -w "$n" -o %i 2>/dev/null | paste -sd'|' || true)
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    if [[ -n $ns && $(readlink "/proc/$p/ns/mnt" 2>/dev/null) == "$ns" ]] ||
      { [[ -n $jobs ]] && grep -qE ":/slurm_$n/uid_[0-9]+/job_($jobs)(/|$)" "/proc/$p/cgroup" 2>/dev/null; }; then
      echo "$p"
    fi
  done
}

node_crash() {
  local dir=$1 n=$2
  dir=$(cd "$dir" && pwd)
  load_info "$dir"
  ((NODES > 1)) || die "node-crash needs a cluster of several nodes"
  check_node "$n"
  local pids jobs id
  jobs=$(SLURM_CONF=$dir/etc/slurm.conf squeue -h -w "$n" -o %i 2>/dev/null || true)
  # Twice: a process forked while the first round was being killed.
  for _ in 1 2; do
    pids=$(node_pids "$dir" "$n")
    # shellcheck disable=SC2086 # one pid a word
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
    sleep 0.2
  done
  rm -f "$(pid_file "$dir" "$n")"
  # cgroup v2: everything the node ran is in its own cgroup, which goes as a reboot's would.
  [[ $PROFILE == production-v2 ]] && cgroup2_remove "$dir" "$n"
  # A reboot would take the jobs' cgroups with it; nobody else removes them now.
  for id in $jobs; do
    find /sys/fs/cgroup/*/"slurm_$n"/uid_*/"job_$id" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

node_start() {
  local dir=$1 n=$2
  dir=$(cd "$dir" && pwd)
  load_info "$dir"
  ((NODES > 1)) || die "node-start needs a cluster of several nodes"
  check_node "$n"
  [[ -z $(node_ns "$dir" "$n") ]] || die "node $n's slurmd runs already"
  export SLURM_CONF=$dir/etc/slurm.conf
  start_slurmd "$dir" "$n"
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
  deps) (($# == 0)) || usage; deps ;;
  start)
    (($# >= 1)) || usage
    d=$1
    shift
    opt_nodes= opt_gpus= opt_profile= opt_accounting=
    while (($#)); do
      case $1 in
        --nodes) (($# >= 2)) || usage; opt_nodes=$2; shift 2 ;;
        --gpus) (($# >= 2)) || usage; opt_gpus=$2; shift 2 ;;
        --profile) (($# >= 2)) || usage; opt_profile=$2; shift 2 ;;
        --accounting) opt_accounting=1; shift ;;
        *) usage ;;
      esac
    done
    start "$d"
    ;;
  stop) (($# == 1)) || usage; stop "$1" ;;
  env)
    if (($# == 1)); then print_env "$1" ""
    elif (($# == 3)) && [[ $2 == --node ]]; then print_env "$1" "$3"
    else usage; fi
    ;;
  exec)
    (($# >= 5)) && [[ $2 == --node && $4 == -- ]] || usage
    d=$1 node=$3
    shift 4
    exec_in "$d" "$node" "$@"
    ;;
  nodes)
    (($# == 1)) || usage
    load_info "$(cd "$1" && pwd)"
    # shellcheck disable=SC2086 # one name a word
    printf '%s\n' $NODE_NAMES
    ;;
  node-crash) (($# == 2)) || usage; node_crash "$1" "$2" ;;
  node-start) (($# == 2)) || usage; node_start "$1" "$2" ;;
  reset-gpus) (($# == 1)) || usage; reset_gpus "$1" ;;
  *) usage ;;
esac
