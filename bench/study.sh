#!/usr/bin/env bash
# The collocation study on one GPU: the paper's three ResNet workloads (Robroek et al.,
# arXiv 2209.06018) at batch 128 and 32, solo and N = 1, 2, 3, 7 copies under naive
# sharing and MPS, each measured by `colloc bench`.
#
#   bash bench/study.sh PART [OUTDIR]
#
# PART: A (small b128, small b32, medium b128), B (medium b32, large b128, large b32),
#       all (both), smoke (one short small-model run to check the setup, ~1 min), or a
#       comma-separated list of WORKLOAD-bBATCH names run in that order, e.g.
#       medium-b32,large-b32,small-b128 (so the cells wanted most come first).
# OUTDIR: where results go (default bench/results); one folder per workload and batch,
#       plus env-PART.txt (GPU, driver, software versions) and study-PART.log, and
#       study-PART.done once every workload of the part has run.
# COLLOC: the colloc binary (default: target/release/colloc, then target/debug/colloc,
#       then colloc on PATH). PYTHON: the interpreter (default python3).
#
# Timing, measured on the H200 (2026-12-02): one configuration takes 20-30 s of wall time
# (start-up of 1-7 Python processes with torch and timm, CUDA context and cuDNN
# autotuning dominate; colloc waits until every copy has printed its first img/s line,
# then WARMUP=3 s, then measures over a window of up to DURATION=7 s). One workload and
# batch = solo + naive 2,3,7 + mps 1,2,3,7 = 8 configurations took 146-197 s, so each
# gets a 300 s cap (`timeout`; a cap that fires leaves that folder without bench.json),
# and `all` (6 workloads) took 1,107 s: more than a 10-minute command, so start it
# detached (setsid nohup) and collect OUTDIR later. Single copies of the small and medium
# models vary by tens of percent from run to run (host-bound; bench/results/README.md,
# Variance): for tighter ratios raise DURATION and repeat the study.
set -euo pipefail

PART=${1:?usage: bench/study.sh A|B|all|smoke [OUTDIR]}
OUTDIR=${2:-bench/results}
WARMUP=${WARMUP:-3s}
DURATION=${DURATION:-7s}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

NAMES=()
case "$PART" in
  smoke) ;;
  A) NAMES=(small-b128 small-b32 medium-b128) ;;
  B) NAMES=(medium-b32 large-b128 large-b32) ;;
  all) NAMES=(small-b128 small-b32 medium-b128 medium-b32 large-b128 large-b32) ;;
  *)
    IFS=, read -r -a NAMES <<<"$PART"
    for n in "${NAMES[@]}"; do
      if ! [[ $n =~ ^(small|medium|large)-b[1-9][0-9]{0,3}$ ]]; then
        echo "study.sh: unknown part $n; valid: A, B, all, smoke, or WORKLOAD-bBATCH names (small|medium|large, e.g. medium-b32) separated by commas" >&2
        exit 2
      fi
    done
    ;;
esac
# File names for this part: the list with its commas made underscores.
LABEL=${PART//,/_}

if [[ -z "${COLLOC:-}" ]]; then
  for c in "$HERE/../target/release/colloc" "$HERE/../target/debug/colloc"; do
    if [[ -x "$c" ]]; then COLLOC=$c; break; fi
  done
  COLLOC=${COLLOC:-colloc}
fi
command -v "$COLLOC" >/dev/null || { echo "study.sh: no colloc binary (set COLLOC)" >&2; exit 2; }
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

CONF="$OUTDIR/colloc-study.toml"
write_node_config "$CONF"

ENVF="$OUTDIR/env-$LABEL.txt"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm)"
  echo "colloc: $("$COLLOC" --version 2>&1)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode,persistence_mode --format=csv 2>&1 || true
  nvidia-smi 2>/dev/null | grep -m1 "CUDA Version" || true
  "$PYTHON" - <<'EOF' 2>&1 || true
import platform, torch, torchvision, timm
print(f"python: {platform.python_version()}")
print(f"torch: {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})")
print(f"torchvision: {torchvision.__version__}")
print(f"timm: {timm.__version__}")
print(f"tf32: cudnn.allow_tf32={torch.backends.cudnn.allow_tf32} cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32} float32_matmul_precision={torch.get_float32_matmul_precision()}")
EOF
  echo "lscpu: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "warmup: $WARMUP, duration: $DURATION"
} >"$ENVF"

LOG="$OUTDIR/study-$LABEL.log"
: >"$LOG"

mps_left() {
  # MPS daemons or servers still running (read-only check; colloc must leave none).
  pgrep -x nvidia-cuda-mps-control >/dev/null 2>&1 && echo yes && return
  pgrep -x nvidia-cuda-mps-server >/dev/null 2>&1 && echo yes && return
  echo none
}

# run NAME WORKLOAD BATCH CAP_SECONDS [COUNTS]
run() {
  local name=$1 workload=$2 batch=$3 cap=$4 counts=${5:-1,2,3,7}
  local dir="$OUTDIR/$name"
  rm -rf "$dir"
  mkdir -p "$dir"
  local cmd=("$COLLOC" --config "$CONF" bench --modes naive,mps,mig --counts "$counts"
    --warmup "$WARMUP" --duration "$DURATION" --startup-timeout 90s --report-dir "$dir"
    -- "$PYTHON" "$HERE/train.py" --workload "$workload" --batch "$batch" --duration 0)
  echo "== $name: ${cmd[*]}" | tee -a "$LOG"
  printf '%q ' "${cmd[@]}" >"$dir/command.txt"
  echo >>"$dir/command.txt"
  local start=$SECONDS rc=0
  timeout --signal=TERM --kill-after=20 "$cap" "${cmd[@]}" >"$dir/table.txt" 2>"$dir/stderr.txt" || rc=$?
  cat "$dir/table.txt" | tee -a "$LOG"
  echo "== $name: exit $rc after $((SECONDS - start)) s; MPS daemons left: $(mps_left)" | tee -a "$LOG"
}

if [[ $PART == smoke ]]; then
  WARMUP=2s DURATION=3s
  { "$PYTHON" "$HERE/train.py" --workload small --batch 32 --duration 3 2>&1 || echo "train.py exited $?"; } | tail -4 | tee -a "$LOG"
  run smoke-small-b32 small 32 150 1,2
fi
for n in "${NAMES[@]}"; do
  run "$n" "${n%-b*}" "${n##*-b}" 300
done
echo "study.sh: $PART done in $SECONDS s; results in $OUTDIR" | tee -a "$LOG"
touch "$OUTDIR/study-$LABEL.done"
