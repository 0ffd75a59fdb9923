#!/usr/bin/env bash
# What colloc adds to a run's start when each run is a Slurm step (colloc run across
# nodes, issue 18). On the local test cluster (tests/slurm/cluster.sh), inside one
# `sbatch -N NODES --gres=gpu:2 --colloc=mig:3g` allocation (4 slots per node):
#
#   bare    K steps of `srun --overlap -N1 -n1 -w nK date +%s.%N`, one at a time: from
#           before srun to the task's first instruction (the `date`); then K steps of
#           `srun … true` one at a time, steps/s;
#   colloc  `colloc run --steps on -j 1 -n K -- true` on one node (one step at a time):
#           from colloc's srun to the run's start on its node (the report's dispatch_s),
#           and runs/s (K over the makespan);
#   colloc  `colloc run -n K -- true` over all NODES nodes (4 x NODES slots): runs/s and
#   wide    the median dispatch, against K bare steps with 4 x NODES at a time.
#
#   bench/dispatch/colloc-steps.sh            # K=60 R=3 NODES=3
#
# The difference between the two one-at-a-time medians is colloc's own share of a run's
# start (the step side's start, its supervisor, the spec over stdin). Needs root and a
# built workspace (cargo build). See docs/multinode.md for what was measured.
set -euo pipefail

K=${K:-60}
R=${R:-3}
NODES=${NODES:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
for v in K R NODES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "colloc-steps.sh: $v=${!v}: give a positive whole number" >&2; exit 2; }
done
((NODES >= 2)) || { echo "colloc-steps.sh: NODES=$NODES: give 2 or more" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "colloc-steps.sh: needs root (it starts a Slurm cluster)" >&2; exit 2; }
colloc=${COLLOC_BIN:-$root/target/debug/colloc}
[[ -x $colloc ]] || { echo "colloc-steps.sh: no colloc at $colloc: cargo build first" >&2; exit 2; }

work=$(mktemp -d /var/tmp/colloc-steps-XXXXXX)
chmod 755 "$work"
cleanup() {
  [[ -n ${job:-} ]] && scancel "$job" 2>/dev/null || true
  "$root/tests/slurm/cluster.sh" stop "$work" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

COLLOC_FAKE_NVML_CTL=${COLLOC_FAKE_NVML_CTL:-$root/target/debug/fake-nvml-ctl} \
  "$root/tests/slurm/cluster.sh" start "$work" --nodes "$NODES" --gpus 2 >/dev/null
export SLURM_CONF=$work/etc/slurm.conf
cd "$work/jobs"

median() { sort -n | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m }'; }

# The job runs every case R times and writes one line per figure into $work/jobs/figs.
cat >"$work/jobs/bench.sh" <<EOF
#!/bin/bash
export COLLOC_CONFIG=$work/etc/colloc.toml
cd $work/jobs
ns() { date +%s.%N; }
for r in \$(seq $R); do
  # bare, one at a time: srun to the task's start
  for i in \$(seq 0 \$(($K - 1))); do
    a=\$(ns); b=\$(srun --overlap -N1 -n1 -w n\$((i % $NODES + 1)) date +%s.%N)
    echo "bare_start \$(echo "\$b - \$a" | bc)" >> figs
  done
  # bare, one at a time: steps/s (nothing else in the loop)
  t0=\$(ns)
  for i in \$(seq 0 \$(($K - 1))); do
    srun --overlap -N1 -n1 -w n\$((i % $NODES + 1)) true
  done
  echo "bare_rate \$(echo "$K / (\$(ns) - \$t0)" | bc -l)" >> figs
  # bare, 4 x NODES at a time
  t0=\$(ns)
  seq 0 \$(($K - 1)) | xargs -P $((4 * NODES)) -I{} bash -c 'srun --overlap -N1 -n1 -w n\$(({} % $NODES + 1)) true'
  echo "bare_wide_rate \$(echo "$K / (\$(ns) - \$t0)" | bc -l)" >> figs
  # colloc, one step at a time on one node
  rm -rf one wide
  $colloc run -q --steps on -j 1 -n $K --report-dir one -- true >/dev/null
  python3 -c "
import json; r = json.load(open('one/colloc-report.json'))
for run in r['runs']:
    for a in run['attempts']:
        print('colloc_start', a['step']['dispatch_s'])
print('colloc_rate', len(r['runs']) / r['summary']['makespan_s'])
" >> figs
  # colloc over every node's slots
  $colloc run -q -n $K --report-dir wide -- true >/dev/null
  python3 -c "
import json; r = json.load(open('wide/colloc-report.json'))
print('colloc_wide_start', r['summary']['median_dispatch_s'])
print('colloc_wide_rate', len(r['runs']) / r['summary']['makespan_s'])
" >> figs
done
EOF
chmod +x "$work/jobs/bench.sh"
job=$(sbatch --parsable -N "$NODES" --gres=gpu:2 --colloc=mig:3g -o "$work/jobs/out" -e "$work/jobs/err" "$work/jobs/bench.sh")
for _ in $(seq 6000); do
  state=$(squeue -h -j "$job" -o %T 2>/dev/null || true)
  [[ -z $state ]] && break
  sleep 0.1
done
if [[ ! -s $work/jobs/figs ]]; then
  echo "colloc-steps.sh: the job wrote no figures; its stderr:" >&2
  cat "$work/jobs/err" >&2
  exit 1
fi
fig() { awk -v k="$1" '$1 == k { print $2 }' "$work/jobs/figs" | median; }
ms() { awk '{ printf "%.0f", $1 * 1000 }'; }
echo "colloc-steps: $K runs of \`true\`, $R repeats, $NODES nodes x 4 slots, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '  %-44s %s\n' \
  "bare srun, one at a time: start (median)" "$(fig bare_start | ms) ms" \
  "colloc step, one at a time: start (median)" "$(fig colloc_start | ms) ms" \
  "bare srun, one at a time: steps/s" "$(fig bare_rate | awk '{ printf "%.1f", $1 }')" \
  "colloc run --steps on -j 1: runs/s" "$(fig colloc_rate | awk '{ printf "%.1f", $1 }')" \
  "bare srun, $((4 * NODES)) at a time: steps/s" "$(fig bare_wide_rate | awk '{ printf "%.1f", $1 }')" \
  "colloc run over $((4 * NODES)) slots: runs/s" "$(fig colloc_wide_rate | awk '{ printf "%.1f", $1 }')" \
  "colloc run over $((4 * NODES)) slots: start (median)" "$(fig colloc_wide_start | ms) ms"
