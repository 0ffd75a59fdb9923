#!/usr/bin/env bash
# Right-sized slots on a real GPU (issue 29's MPS part; never touches MIG or any GPU
# setting): `colloc run --mode mps:4` starts its own MPS daemon with each client's
# memory pinned to a quarter of the GPU. Four runs hold GPU memory for a few seconds:
# three within the limit, one asking for more than a quarter. Expected: the big one fails
# alone with a CUDA out-of-memory error, the other three succeed; and the report gives
# each run its declared need, its slot's size and its own peak.
#
#   COLLOC=target/release/colloc bash bench/h200-fit.sh OUTDIR
#
# About 40 s on the H200. Needs PyTorch. Env: PYTHON (python3).
set -euo pipefail
OUT=${1:?usage: h200-fit.sh OUTDIR}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
: "${COLLOC:?set COLLOC to a colloc binary}"
COLLOC=$(cd "$(dirname "$COLLOC")" && pwd)/$(basename "$COLLOC")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

write_node_config "$work/colloc.toml"
export COLLOC_CONFIG=$work/colloc.toml
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
unset COLLOC_MODE COLLOC_DEVICES COLLOC_SLOTS SLURM_JOB_ID SLURM_RESTART_COUNT

# Hold GIB GiB on the GPU for SECONDS, doing small matmuls, printing a throughput line.
cat >"$work/hold.py" <<'EOF'
import os, sys, time
import torch
gib, seconds = float(sys.argv[1]), float(sys.argv[2])
x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1)
a = torch.randn(1024, 1024, device="cuda")
end = time.time() + seconds
n = 0
while time.time() < end:
    for _ in range(50):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
    n += 50
    print(f"step={n} img/s={n * 128 / max(1e-3, seconds - (end - time.time())):.1f}", flush=True)
print("held", gib, "GiB", flush=True)
EOF

cat >"$work/runs.toml" <<EOF
[defaults]
env = { PYTHONUNBUFFERED = "1" }
[[run]]
name = "hold-4g"
command = ["$PYTHON", "$work/hold.py", "4", "8"]
gpu_memory = "6GiB"
[[run]]
name = "hold-8g"
command = ["$PYTHON", "$work/hold.py", "8", "8"]
gpu_memory = "10GiB"
[[run]]
name = "hold-12g"
command = ["$PYTHON", "$work/hold.py", "12", "8"]
gpu_memory = "14GiB"
[[run]]
name = "past-limit"
command = ["$PYTHON", "$work/hold.py", "40", "8"]
EOF
cp "$work/runs.toml" "$OUT/runs.toml"
set +e
"$COLLOC" run --mode mps:4 --report-dir "$OUT/report" -f "$work/runs.toml" >"$OUT/console.txt" 2>&1
rc=$?
set -e
cat "$OUT/console.txt"
echo "colloc exit: $rc (1 expected: one run failed)"
grep -h -i "out of memory" "$OUT/report/logs/past-limit.log" | head -2 || echo "past-limit: no out-of-memory line"
"$PYTHON" - "$OUT/report/colloc-report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for run in r["runs"]:
    g = run.get("gpu") or {}
    peak = g.get("peak_memory_bytes")
    print(f'{run["name"]}: {run["state"]} exit={run["exit_code"]} oom={run["oom"]} '
          f'declared={run.get("gpu_memory_mib")} MiB slot={run.get("slot_memory_mib")} MiB '
          f'peak={None if peak is None else peak // 2**20} MiB')
EOF
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader || true
