#!/bin/bash
# A real one-node Slurm cluster on this machine, with fake GPUs, for colloc's tests, the
# demo and the latency benchmark. Needs root (slurmd, mknod, mount namespace).
#
#   cluster.sh deps            install the Debian packages that are missing
#   cluster.sh start DIR       write configs under DIR and start munged, slurmctld, slurmd
#   cluster.sh stop DIR        wait for jobs and epilogs, stop slurmd, slurmctld, munged
#   cluster.sh env DIR         print `export` lines for SLURM_CONF and the fake NVML state
#
# start reads (all optional):
#   COLLOC_CLUSTER_GPUS    number of fake GPUs (default 1): device files DIR/dev/fakegpuN
#                          (char 195:N) in gres.conf, Gres=gpu:N on the node
#   COLLOC_FAKE_NVML_GPUS  their models for the fake NVML (default A100-40GB, one per GPU)
#   COLLOC_SPANK_PLUGIN    the plugin to load (default target/debug/libcolloc_spank.so);
#                          "none" leaves plugstack.conf empty
#   COLLOC_FAKE_NVML_LIB   the fake libnvidia-ml (default target/debug/libfake_nvml.so)
#   COLLOC_FAKE_NVML_CTL   its control tool (default target/debug/fake-nvml-ctl)
#   COLLOC_MPS_CONTROL     the MPS control program (default tests/fake-mps/nvidia-cuda-mps-control)
#   COLLOC_CLUSTER_NO_NAMESPACE=1  do without the mount namespace (see below)
#
# The fake NVML keeps its state in DIR/fake-nvml/state.json. The job prolog runs with an
# almost empty environment (no COLLOC_FAKE_NVML_STATE reaches it), so slurmd runs in its own
# mount namespace where DIR/fake-nvml is mounted on the fake's default folder
# /tmp/colloc-fake-nvml: prolog, epilog and jobs see this cluster's state, nothing else on
# the machine is touched. Where namespaces are not allowed, the default folder itself is
# used (and the state is copied back and forth at start and stop).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
DEFAULT_FAKE_DIR=/tmp/colloc-fake-nvml
PACKAGES=(slurmctld slurmd slurm-client munge libslurm-dev libclang1-14 libclang-common-14-dev)

die() { echo "cluster.sh: $*" >&2; exit 1; }
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
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  die "no free TCP port found"
}

start() {
  local dir=$1
  [[ $(id -u) == 0 ]] || die "needs root (slurmd, mknod, mount)"
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    deps
  fi
  local gpus=${COLLOC_CLUSTER_GPUS:-1}
  [[ $gpus =~ ^[1-8]$ ]] || die "COLLOC_CLUSTER_GPUS=$gpus: give 1 to 8"
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

  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ -e $dir/slurm/slurmd.pid ]] && die "$dir already has a running cluster (cluster.sh stop $dir)"
  rm -rf "${dir:?}/etc" "${dir:?}/slurm" "${dir:?}/dev" "${dir:?}/state" "${dir:?}/run" "${dir:?}/fake-nvml"
  mkdir -p "$dir/etc" "$dir/slurm/spool" "$dir/slurm/state" "$dir/dev" "$dir/state" \
    "$dir/run" "$dir/fake-nvml" "$dir/jobs"
  chmod 1777 "$dir/jobs"
  # Jobs run as other users in some tests: let them reach their output folder.
  chmod 755 "$dir"

  local host ctld_port slurmd_port
  host=$(hostname -s)
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(free_port); done

  local gres_lines=""
  for ((i = 0; i < gpus; i++)); do
    mknod "$dir/dev/fakegpu$i" c 195 "$i"
    gres_lines+="NodeName=$host Name=gpu File=$dir/dev/fakegpu$i"$'\n'
  done
  printf '%s' "$gres_lines" >"$dir/etc/gres.conf"

  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=colloc-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
PrologFlags=Alloc
PrologEpilogTimeout=120
KillWait=5
MinJobAge=2
InactiveLimit=0
StateSaveLocation=$dir/slurm/state
SlurmdSpoolDir=$dir/slurm/spool
SlurmctldPidFile=$dir/slurm/slurmctld.pid
SlurmdPidFile=$dir/slurm/slurmd.pid
SlurmctldLogFile=$dir/slurm/slurmctld.log
SlurmdLogFile=$dir/slurm/slurmd.log
SlurmdDebug=debug
PlugStackConfig=$dir/etc/plugstack.conf
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 Gres=gpu:$gpus State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
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
EOF

  if [[ $plugin == none ]]; then
    : >"$dir/etc/plugstack.conf"
  else
    echo "required $plugin config=$dir/etc/colloc.toml" >"$dir/etc/plugstack.conf"
  fi

  "$fake_ctl" --state "$dir/fake-nvml/state.json" init --gpus "$models" >/dev/null
  chmod -R a+rwX "$dir/fake-nvml"
  echo "$models" >"$dir/fake-nvml/models"

  export SLURM_CONF=$dir/etc/slurm.conf

  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    touch "$dir/slurm/munged.ours"
    wait_for 50 sh -c 'munge -n | unmunge' || die "munged did not start"
  fi

  slurmctld -c
  wait_for 100 sh -c 'scontrol ping | grep -q UP' || die "slurmctld did not come up (see $dir/slurm/slurmctld.log)"

  mkdir -p "$DEFAULT_FAKE_DIR"
  if [[ -z ${COLLOC_CLUSTER_NO_NAMESPACE:-} ]] && unshare -m --propagation private true 2>/dev/null; then
    unshare -m --propagation private sh -c \
      "mount --bind '$dir/fake-nvml' '$DEFAULT_FAKE_DIR' && exec slurmd"
  else
    log "no mount namespace here: the fake NVML state lives in $DEFAULT_FAKE_DIR for this cluster"
    touch "$dir/fake-nvml/shared-default"
    cp "$dir/fake-nvml/state.json" "$DEFAULT_FAKE_DIR/state.json"
    rm -f "$dir/fake-nvml/state.json"
    ln -s "$DEFAULT_FAKE_DIR/state.json" "$dir/fake-nvml/state.json"
    slurmd
  fi
  wait_for 100 sh -c "sinfo -h -N -o %T | grep -qx idle" ||
    die "slurmd did not come up idle: $(sinfo -h -N -o '%T %E' 2>&1) (see $dir/slurm/slurmd.log)"
}

stop() {
  local dir
  dir=$(cd "$1" && pwd)
  export SLURM_CONF=$dir/etc/slurm.conf
  if [[ -f $dir/slurm/slurmctld.pid ]] && scontrol ping 2>/dev/null | grep -q UP; then
    scancel --full "--user=$(id -un)" >/dev/null 2>&1 || true
    squeue -h -o %i | xargs -r scancel >/dev/null 2>&1 || true
    # Epilogs restore the GPUs: let them finish before slurmd goes.
    # shellcheck disable=SC2016 # expanded by that sh, at each try
    wait_for 300 sh -c '[ -z "$(squeue -h)" ] && sinfo -h -N -o %T | grep -qvE "comp|mix|alloc"' ||
      log "jobs still finishing: $(squeue -h 2>&1 | head -3)"
  fi
  local name pid
  for name in slurmd slurmctld; do
    if [[ -f $dir/slurm/$name.pid ]]; then
      pid=$(cat "$dir/slurm/$name.pid")
      if [[ $pid =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null; then
        wait_for 200 sh -c "! kill -0 $pid" || { log "$name $pid did not stop; killing it"; kill -9 "$pid" 2>/dev/null || true; }
      fi
      rm -f "$dir/slurm/$name.pid"
    fi
  done
  if [[ -f $dir/slurm/munged.ours ]]; then
    pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null; then
      wait_for 50 sh -c "! kill -0 $pid" || true
    fi
    rm -f "$dir/slurm/munged.ours"
  fi
  if [[ -f $dir/fake-nvml/shared-default ]]; then
    rm -f "$dir/fake-nvml/state.json" "$dir/fake-nvml/shared-default"
    mv "$DEFAULT_FAKE_DIR/state.json" "$dir/fake-nvml/state.json" 2>/dev/null || true
  fi
}

print_env() {
  local dir
  dir=$(cd "$1" && pwd)
  echo "export SLURM_CONF=$dir/etc/slurm.conf"
  echo "export COLLOC_FAKE_NVML_STATE=$dir/fake-nvml/state.json"
  echo "export COLLOC_CONFIG=$dir/etc/colloc.toml"
}

case "${1:-}" in
  deps) deps ;;
  start) [[ $# == 2 ]] || die "usage: cluster.sh start DIR"; start "$2" ;;
  stop) [[ $# == 2 ]] || die "usage: cluster.sh stop DIR"; stop "$2" ;;
  env) [[ $# == 2 ]] || die "usage: cluster.sh env DIR"; print_env "$2" ;;
  *) die "usage: cluster.sh deps | start DIR | stop DIR | env DIR" ;;
esac
