#!/usr/bin/env bash
# How many job steps per second does slurmctld start? Inside one `sbatch -N NODES`
# allocation on the local test cluster (tests/slurm/cluster.sh), K steps of
# `srun --overlap -N1 -n1 -w nK true` (round-robin over the nodes), started one after
# another and with C at a time, with colloc's plugin in plugstack.conf and without (the
# two alternate, so background noise does not favour one). Medians over R repeats.
#
#   bench/dispatch/dispatch.sh                 # K=60 R=3 C="1 4 8 16" NODES=3 PROFILE=simple
#   K=200 R=5 PROFILE=production bench/dispatch/dispatch.sh
#
# Prints, for each case: steps/s (K over the wall time of the K steps), the median wall
# time of one `srun` (start to exit, including srun's own start-up), and the CPU time
# slurmctld spent per step (its user+system time over the K steps, divided by K): the
# share of a step's cost that one central daemon carries, whatever the number of nodes.
# What this means for colloc run across many nodes: bench/dispatch/README.md.
#
# Needs root and a built workspace (cargo build; COLLOC_SPANK_PLUGIN picks another build).
set -euo pipefail

K=${K:-60}
R=${R:-3}
C=${C:-"1 4 8 16"}
NODES=${NODES:-3}
PROFILE=${PROFILE:-simple}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
for v in K R NODES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "dispatch.sh: $v=${!v}: give a positive whole number" >&2; exit 2; }
done
((NODES >= 2)) || { echo "dispatch.sh: NODES=$NODES: give 2 or more" >&2; exit 2; }
for c in $C; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || { echo "dispatch.sh: C=\"$C\": give positive whole numbers" >&2; exit 2; }
done
[[ $PROFILE == simple || $PROFILE == production ]] ||
  { echo "dispatch.sh: PROFILE=$PROFILE: valid: simple, production" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "dispatch.sh: needs root (it starts a Slurm cluster)" >&2; exit 2; }

# The job container hides /tmp from jobs: keep the cluster elsewhere under production.
work=$(mktemp -d /var/tmp/colloc-dispatch-XXXXXX)
chmod 755 "$work"
cleanup() {
  "$root/tests/slurm/cluster.sh" stop "$work" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$root/tests/slurm/cluster.sh" start "$work" --nodes "$NODES" --gpus 1 --profile "$PROFILE" >/dev/null
export SLURM_CONF=$work/etc/slurm.conf
plugstack=$work/etc/plugstack.conf
with_colloc=$(cat "$plugstack")
cd "$work/jobs"

job=$(sbatch --parsable -N "$NODES" --gres=gpu:1 -o /dev/null --wrap 'sleep 100000')
for _ in $(seq 600); do
  [[ $(squeue -h -j "$job" -o %T) == RUNNING ]] && break
  sleep 0.1
done
[[ $(squeue -h -j "$job" -o %T) == RUNNING ]] || { echo "dispatch.sh: job $job did not start" >&2; exit 1; }

ns() { date +%s%N; }
median() { sort -n | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m }'; }

# One step on node number $1 (0-based, round-robin); prints its wall time in ns.
step() {
  local n=$(( $1 % NODES + 1 )) t0
  t0=$(ns)
  srun --jobid="$job" --overlap -N1 -n1 -w "n$n" true
  echo $(( $(ns) - t0 ))
}
export -f step ns
export job NODES

ctld=$(cat "$work/slurm/slurmctld.pid")
hz=$(getconf CLK_TCK)
# slurmctld's user+system CPU time so far, in clock ticks.
ctld_ticks() { awk '{ print $14 + $15 }' "/proc/$ctld/stat"; }

# K steps with concurrency $1; appends one line per step to $2 and slurmctld's CPU ms per
# step to $3, prints steps/s.
batch() {
  local conc=$1 out=$2 cpu=$3 t0 t1 c0 c1
  c0=$(ctld_ticks)
  t0=$(ns)
  seq 0 $((K - 1)) | xargs -P "$conc" -I{} bash -c 'step {}' >>"$out"
  t1=$(ns)
  c1=$(ctld_ticks)
  awk -v k="$K" -v t=$((c1 - c0)) -v hz="$hz" 'BEGIN { printf "%.2f\n", t * 1000 / hz / k }' >>"$cpu"
  awk -v k="$K" -v d=$((t1 - t0)) 'BEGIN { printf "%.2f\n", k / (d / 1e9) }'
}

# Warm-up: page cache, munge, slurmctld's threads, both plugstack variants.
for _ in 1 2; do
  echo "$with_colloc" >"$plugstack"
  batch 4 /dev/null /dev/null >/dev/null
  : >"$plugstack"
  batch 4 /dev/null /dev/null >/dev/null
done

echo "dispatch: $K steps of srun --overlap -N1 -n1 -w nK true in one $NODES-node job, $PROFILE profile, $R repeats, $(nproc) CPUs"
printf '  %-10s %-11s %8s %22s %22s\n' plugstack concurrency "steps/s" "srun wall (median ms)" \
  "slurmctld CPU ms/step"
for conc in $C; do
  for variant in colloc none; do : >"$work/rate-$variant"; : >"$work/lat-$variant"; : >"$work/cpu-$variant"; done
  for _ in $(seq "$R"); do
    for variant in colloc none; do
      if [[ $variant == colloc ]]; then echo "$with_colloc" >"$plugstack"; else : >"$plugstack"; fi
      batch "$conc" "$work/lat-$variant" "$work/cpu-$variant" >>"$work/rate-$variant"
    done
  done
  for variant in colloc none; do
    printf '  %-10s %-11s %8s %22s %22s\n' "$variant" "$conc" \
      "$(median <"$work/rate-$variant")" \
      "$(median <"$work/lat-$variant" | awk '{ printf "%.0f", $1 / 1e6 }')" \
      "$(median <"$work/cpu-$variant")"
  done
done
echo "$with_colloc" >"$plugstack"
scancel "$job"
