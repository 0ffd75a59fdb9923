#!/bin/bash
# Does the colloc SPANK plugin slow down submission? Median latency of `sbatch --wrap true`
# over N submissions (default 50) with the plugstack line and without it, on the local
# test cluster.
#
# sbatch loads SPANK plugins itself, from the PlugStackConfig of the slurm.conf it reads,
# so one cluster serves both cases: the submissions alternate between two copies of
# slurm.conf that differ only in PlugStackConfig (and a third case adds --colloc=off),
# which keeps background noise from favouring one case. Jobs are submitted held (-H), so
# what is timed is sbatch alone, not the jobs; they are cancelled afterwards.
#
#   tests/slurm/bench-sbatch-latency.sh [N]
#
# Needs root and a built plugin (cargo build; COLLOC_SPANK_PLUGIN picks another build);
# COLLOC_CLUSTER_PROFILE=production measures on the production-like configuration.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
n=${1:-50}
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench-sbatch-latency.sh [N]" >&2; exit 2; }
# Outside /tmp, so that COLLOC_CLUSTER_PROFILE=production (a job container) works too.
work=$(mktemp -d /var/tmp/colloc-bench-XXXXXX)
chmod 755 "$work"
cleanup() {
  "$here/cluster.sh" stop "$work" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$here/cluster.sh" start "$work" >/dev/null
with_conf=$work/etc/slurm.conf
without_conf=$work/etc/slurm-without-colloc.conf
: >"$work/etc/plugstack-empty.conf"
sed "s|^PlugStackConfig=.*|PlugStackConfig=$work/etc/plugstack-empty.conf|" "$with_conf" >"$without_conf"
cd "$work/jobs"

# Print the submission time of one held job, in nanoseconds.
submit() { # conf, sbatch args...
  local conf=$1 t0 t1
  shift
  t0=$(date +%s%N)
  SLURM_CONF=$conf sbatch -H -o /dev/null "$@" --wrap true >/dev/null
  t1=$(date +%s%N)
  echo $((t1 - t0))
}

median_ms() {
  sort -n | awk '{a[NR]=$1} END {
    m = (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2; printf "%.2f", m / 1e6 }'
}

# Warm-up: page cache, munge, slurmctld threads, the plugin file.
for _ in $(seq 10); do
  submit "$without_conf" >/dev/null
  submit "$with_conf" >/dev/null
done
# Plain sbatch must not see the option without the plugin: a sanity check of the setup.
if SLURM_CONF=$without_conf sbatch --help | grep -- --colloc >/dev/null; then
  echo "bench: the plugin is loaded without the plugstack line?" >&2
  exit 1
fi

: >"$work/without"
: >"$work/with"
: >"$work/with-off"
for ((i = 0; i < n; i++)); do
  submit "$without_conf" >>"$work/without"
  submit "$with_conf" >>"$work/with"
  submit "$with_conf" --colloc=off >>"$work/with-off"
done
SLURM_CONF=$with_conf scancel --full "--user=$(id -un)" >/dev/null 2>&1 || true

without=$(median_ms <"$work/without")
with=$(median_ms <"$work/with")
with_off=$(median_ms <"$work/with-off")
echo "median sbatch latency over $n submissions each (interleaved, held jobs):"
printf '  %-40s %8s ms\n' "without the plugstack line" "$without" \
  "with the plugin" "$with" "with the plugin, --colloc=off" "$with_off"
awk -v a="$without" -v b="$with" -v c="$with_off" 'BEGIN {
  printf "  difference: %+.1f%% (no option), %+.1f%% (--colloc=off); target: within 5%%\n",
    (b - a) / a * 100, (c - a) / a * 100 }'
