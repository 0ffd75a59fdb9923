#!/bin/bash
# colloc's main job, end to end on this machine, no GPU needed:
#   1. installs Slurm 22.05, munge and libclang from Debian when missing, builds colloc;
#   2. starts a one-node Slurm cluster on loopback with a fake A100 40GB (a character
#      device for Slurm, libfake_nvml.so standing in for libnvidia-ml);
#   3. shows that a bad --colloc value is refused before anything is queued;
#   4. submits `sbatch --colloc=mig:3g --gres=gpu:1` of an example job that prints what
#      it saw, waits, prints its output, `colloc status` showing the GPU restored and
#      `colloc status --cluster` (every node, from what its prolog and epilog published);
#   5. stops the cluster.
# Needs root (Slurm daemons, device files). Set COLLOC_DEMO_KEEP=1 to keep the cluster's
# folder (logs, job output) afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [[ -t 1 ]]; then
  say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  say() { printf '\n== %s\n' "$*"; }
fi
die() { echo "demo: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (it starts slurmctld/slurmd and makes device files); try: sudo $0"
command -v cargo >/dev/null || die "needs a Rust toolchain (cargo): https://rustup.rs"

say "packages (Slurm, munge, libclang for the plugin's bindings)"
tests/slurm/cluster.sh deps
echo "ok: $(dpkg-query -W -f='${Package} ${Version}\n' slurmd munge | paste -sd, -)"

say "build: the SPANK plugin, the colloc command, the fake libnvidia-ml"
cargo build --quiet -p colloc-spank -p colloc -p fake-nvml
export PATH=$root/target/debug:$PATH

dir=$(mktemp -d /tmp/colloc-demo-XXXXXX)
stop_cluster() {
  tests/slurm/cluster.sh stop "$dir" || true
  if [[ -n ${COLLOC_DEMO_KEEP:-} ]]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap stop_cluster EXIT

say "start a one-node Slurm cluster with one fake A100 40GB ($dir)"
tests/slurm/cluster.sh start "$dir"
eval "$(tests/slurm/cluster.sh env "$dir")"
sinfo -N -o '%N %T %G'
echo "plugstack.conf: $(cat "$dir/etc/plugstack.conf")"

say "the GPU before the job"
colloc status

say "a bad value never reaches the queue: sbatch --colloc=mig:5g"
if sbatch --gres=gpu:1 --colloc=mig:5g --wrap true; then
  die "sbatch accepted --colloc=mig:5g"
fi
echo "(queue: $(squeue -h | wc -l) jobs)"

say "sbatch --colloc=mig:3g --gres=gpu:1 slurm-conf/examples/show-env.sbatch"
cp slurm-conf/examples/show-env.sbatch "$dir/jobs/"
cd "$dir/jobs"
job=$(sbatch --parsable --colloc=mig:3g --gres=gpu:1 -o "$dir/jobs/%j.out" -e "$dir/jobs/%j.err" show-env.sbatch)
echo "submitted job $job; waiting for it and for its epilog"
for _ in $(seq 600); do
  state=$(scontrol -o show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  node=$(sinfo -h -N -o %T)
  case $state in PENDING | RUNNING | CONFIGURING | COMPLETING | "") ;; *) [[ $node == idle ]] && break ;; esac
  sleep 0.1
done
cd "$root"
echo "job $job: $state"

say "what the job saw (its output)"
cat "$dir/jobs/$job.out"
[[ -s $dir/jobs/$job.err ]] && { echo "--- stderr ---"; cat "$dir/jobs/$job.err"; }

say "after the job: colloc status"
colloc status

say "the whole cluster, from what each node's prolog and epilog published: colloc status --cluster"
colloc status --cluster

instances=$(fake-nvml-ctl show --json | grep -c '"profile_id"' || true)
journals=$(find "$dir/state" -name '*.json' | wc -l)
if [[ $state == COMPLETED && $instances == 0 && $journals == 0 ]] &&
  grep -q '^COLLOC_SLOTS=2$' "$dir/jobs/$job.out"; then
  say "done: the job ran on 2 x 3g.20gb MIG instances, and the GPU is back as it was"
else
  die "unexpected: job $state, $instances MIG instance(s) and $journals journal(s) left"
fi
