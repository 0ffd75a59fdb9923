#!/usr/bin/env bash
# colloc run on a GPU, as a student's sweep would use it: three batch sizes of the small
# ResNet (bench/train.py), packed three at a time under MPS (colloc starts and stops its
# own MPS daemon), each batch size first measured alone (--solo-baseline), with the loss
# as a user metric. Checks by eye what issue 12 asks of the figures on real training:
# per-run solo figures, speed-up and what it covers, aggregate, energy shares that add up
# to the GPU's, and the charts.
#
#   COLLOC=target/release/colloc bash bench/run-sweep.sh [OUTDIR]
#
# OUTDIR (default bench/results/colloc-run-sweep-mps): runs.toml, colloc.toml, env.txt,
# console.txt (colloc's stdout and stderr), and report/ (the record: events/, the JSON,
# CSV, charts and logs). About 3.5 minutes on the H200: three solo measurements of
# SOLO_WINDOW (25 s) plus start-up, then one wave of three runs of DURATION (60 s).
# Env: PYTHON (python3), SOLO_WINDOW, DURATION, BATCHES ("32 128 256").
set -euo pipefail

OUT=${1:-bench/results/colloc-run-sweep-mps}
PYTHON=${PYTHON:-python3}
SOLO_WINDOW=${SOLO_WINDOW:-25s}
DURATION=${DURATION:-60}
BATCHES=${BATCHES:-32 128 256}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
find_colloc
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ -e "$OUT/report" ]]; then
  echo "run-sweep.sh: $OUT/report exists; give another OUTDIR" >&2
  exit 2
fi

write_node_config "$OUT/colloc.toml"
export COLLOC_CONFIG=$OUT/colloc.toml
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
unset COLLOC_MODE COLLOC_DEVICES COLLOC_SLOTS SLURM_JOB_ID SLURM_RESTART_COUNT

grid=$(printf '"%s", ' $BATCHES)
cat >"$OUT/runs.toml" <<EOF
# bench/run-sweep.sh: three batch sizes of the small ResNet, ${DURATION} s each.
[defaults]
metrics = { loss = 'loss=(?P<value>[0-9.]+)' }
env = { PYTHONUNBUFFERED = "1" }

[[sweep]]
name = "small-b{bs}"
command = ["$PYTHON", "$HERE/train.py", "--workload", "small", "--batch", "{bs}", "--duration", "$DURATION", "--epoch-size", "100000"]
grid = { bs = [${grid%, }] }
EOF

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv,noheader || true
  "$PYTHON" -c 'import torch, timm; print("torch", torch.__version__, "timm", timm.__version__)' || true
  "$COLLOC" --version
} >"$OUT/env.txt" 2>&1

set +e
"$COLLOC" run --mode mps -j 3 --solo-baseline --solo-window "$SOLO_WINDOW" --solo-budget 5m \
  --interval 1s --status-every 20s --report-dir "$OUT/report" -f "$OUT/runs.toml" \
  >"$OUT/console.txt" 2>&1
rc=$?
set -e
tail -n 25 "$OUT/console.txt"
# Live MPS processes only: a daemon that exited is a zombie until its parent reaps it
# (on the lent H200 the container's PID 1, once colloc has exited, does not).
left=$(ps -eo pid=,stat=,args= | awk '$2 !~ /^Z/ && /nvidia-cuda-mps/ && !/awk/ { print $1 }' | tr '\n' ' ')
echo "exit $rc; MPS processes left afterwards: ${left:-none}" | tee -a "$OUT/console.txt"
echo "outputs: $OUT"
exit $rc
