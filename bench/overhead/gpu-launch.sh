#!/usr/bin/env bash
# The same N training runs on one GPU launched with plain `&` in a shell and through
# `colloc run`: aggregate throughput of each, and colloc's as a share of plain's.
# Target (issue 4): within 2%.
#
#   bash bench/overhead/gpu-launch.sh [naive|mps] [OUTDIR]
#
# Env: N=4 runs, DURATION=40 s of training each, WORKLOAD=small, BATCH=128, SKIP=5 (the
# first img/s lines of each run left out: start-up, cuDNN autotuning), REPEAT=2 (plain
# and colloc alternate), PYTHON=python3, COLLOC (default target/release/colloc).
# For mps the plain launch gets its own MPS daemon, as colloc starts one for itself.
# Both sides are measured from the runs' own output with the same estimator: per run the
# mean of its img/s lines after the first SKIP, summed over the N runs (they all run for
# the same DURATION side by side). colloc's own report figure is printed as well.
set -euo pipefail

MODE=${1:-naive}
OUT=${2:-$(mktemp -d /tmp/colloc-gpu-launch.XXXXXX)}
N=${N:-4}
DURATION=${DURATION:-40}
WORKLOAD=${WORKLOAD:-small}
BATCH=${BATCH:-128}
SKIP=${SKIP:-5}
REPEAT=${REPEAT:-2}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [[ -z "${COLLOC:-}" ]]; then
  for c in "$ROOT/target/release/colloc" "$ROOT/target/debug/colloc"; do
    if [[ -x "$c" ]]; then COLLOC=$c; break; fi
  done
fi
: "${COLLOC:?no colloc binary: cargo build --release -p colloc, or set COLLOC}"
case "$MODE" in naive|mps) ;; *) echo "mode must be naive or mps" >&2; exit 2 ;; esac
mkdir -p "$OUT"
export COLLOC_CONFIG=${COLLOC_CONFIG:-$OUT/none.toml}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
TRAIN=("$PYTHON" "$ROOT/bench/train.py" --workload "$WORKLOAD" --batch "$BATCH" --duration "$DURATION")

# Sum over runs of the mean img/s after the first SKIP lines; args: log files.
aggregate() {
  local total=0 f m
  for f in "$@"; do
    m=$(grep -o 'img/s=[0-9.eE+-]*' "$f" | cut -d= -f2 | awk -v k="$SKIP" 'NR > k { s += $1; n++ } END { if (n) printf "%.3f", s / n; else print "nan" }')
    [[ "$m" == nan ]] && { echo "no throughput after $SKIP lines in $f" >&2; return 1; }
    total=$(awk -v a="$total" -v b="$m" 'BEGIN { printf "%.3f", a + b }')
  done
  echo "$total"
}

plain() {
  local dir=$1 daemon=""
  mkdir -p "$dir"
  if [[ "$MODE" == mps ]]; then
    daemon=$(mktemp -d /tmp/plain-mps.XXXXXX)
    mkdir -p "$daemon/pipe" "$daemon/log"
    export CUDA_MPS_PIPE_DIRECTORY=$daemon/pipe CUDA_MPS_LOG_DIRECTORY=$daemon/log
    nvidia-cuda-mps-control -d
  fi
  local pids=()
  for i in $(seq "$N"); do
    "${TRAIN[@]}" --seed "$i" > "$dir/run$i.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [[ -n "$daemon" ]]; then
    echo quit | nvidia-cuda-mps-control || true
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    rm -rf "$daemon"
  fi
  return $rc
}

through_colloc() {
  local dir=$1
  # -n N copies of one command; each gets COLLOC_RUN_INDEX, used as the seed.
  "$COLLOC" run --mode "$MODE" -j "$N" -n "$N" -q --interval 1s --report-dir "$dir" -- \
    sh -c 'exec "$@" --seed $((COLLOC_RUN_INDEX + 1))' sh "${TRAIN[@]}" > "$dir.out" 2>&1
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 || true
plain_figs=()
colloc_figs=()
for r in $(seq "$REPEAT"); do
  plain "$OUT/plain-$r"
  plain_figs+=("$(aggregate "$OUT"/plain-$r/run*.log)")
  through_colloc "$OUT/colloc-$r"
  colloc_figs+=("$(aggregate "$OUT"/colloc-$r/logs/run*.log)")
  rep=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['summary']; print(s['aggregate_throughput'], s['makespan_s'])" "$OUT/colloc-$r/colloc-report.json")
  echo "round $r: plain & ${plain_figs[-1]} img/s; colloc run ${colloc_figs[-1]} img/s (colloc's report: aggregate, makespan = $rep)"
done
p=$(printf '%s\n' "${plain_figs[@]}" | awk '{ s += $1 } END { printf "%.3f", s / NR }')
c=$(printf '%s\n' "${colloc_figs[@]}" | awk '{ s += $1 } END { printf "%.3f", s / NR }')
echo "mode $MODE, $N x $WORKLOAD b$BATCH, ${DURATION}s: plain & $p img/s, colloc run $c img/s"
awk -v p="$p" -v c="$c" 'BEGIN { d = (c - p) / p * 100; printf "colloc vs plain: %+.2f%% (target: within 2%%): %s\n", d, (d >= -2 && d <= 2) ? "met" : "NOT met" }'
if [[ "$MODE" == mps ]]; then
  left=$(pgrep -f nvidia-cuda-mps || true)
  echo "MPS processes left afterwards: ${left:-none}"
fi
echo "logs and reports: $OUT"
