#!/bin/bash
# MPS per-process memory attribution on the real H200 (issue 26), for the lead to run.
#
#   OUT=/some/dir bash tests/gpu/mps_memory.sh          # from the repo root, colloc built
#                                                         # here with `cargo build --release`
#
# 1. `colloc run --mode mps -j 3` runs 3 PyTorch clients that each hold a known tensor
#    (1, 2 and 3 GiB) for ~20 s, printing img/s lines. Expected in colloc-report.json:
#    each run's gpu.peak_memory_bytes ~ its tensor + its CUDA context (~600 MiB on driver
#    580: ~1.6, 2.6, 3.6 GiB), none several times another's; gpus[0].mps_server_peak_bytes
#    ~66 MiB (the server's, nobody's).
# 2. The same three clients' pids, read by NVML directly (nvidia-ml-py) while they run,
#    saved to nvml-lists.txt, as the truth to compare with.
# 3. `colloc bench --modes mps --counts 2` with the 1 GiB client: each copy's
#    copy_peak_memory_bytes ~1.6 GiB, peak_memory_bytes their sum (was 0.0 GiB).
# Wall time ~100 s. Writes everything under $OUT.
set -u
BIN=${COLLOC_BIN:-target/release/colloc}
OUT=${OUT:-/tmp/colloc-mps-memory}
mkdir -p "$OUT"
cat > "$OUT/colloc.toml" <<CFG
version = 1
nvml_library = "/usr/local/nvidia/lib64/libnvidia-ml.so.1"
mps_control = "/usr/local/nvidia/bin/nvidia-cuda-mps-control"
CFG
cat > "$OUT/hold.py" <<'PY'
import os, sys, time
import torch
gib = float(sys.argv[1]); secs = float(sys.argv[2])
x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
x.fill_(1)
a = torch.randn(1024, 1024, device="cuda")
t0 = time.time(); n = 0; last = t0
while time.time() - t0 < secs:
    for _ in range(20):
        a = (a @ a).tanh()
    torch.cuda.synchronize(); n += 20
    now = time.time()
    if now - last >= 0.5:
        print(f"img/s={n / (now - last):.1f}", flush=True); n = 0; last = now
PY
cat > "$OUT/runs.toml" <<TOML
[[run]]
name = "hold1"
command = ["python3", "$OUT/hold.py", "1", "20"]
[[run]]
name = "hold2"
command = ["python3", "$OUT/hold.py", "2", "20"]
[[run]]
name = "hold3"
command = ["python3", "$OUT/hold.py", "3", "20"]
TOML
cat > "$OUT/lists.py" <<'PY'
import time, pynvml
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
for _ in range(6):
    time.sleep(3)
    def fmt(ps): return [(p.pid, (p.usedGpuMemory or 0) >> 20) for p in ps]
    def comm(pid):
        try: return open(f"/proc/{pid}/comm").read().strip() + " sid=" + open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[3]
        except OSError: return "?"
    c = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    try: m = pynvml.nvmlDeviceGetMPSComputeRunningProcesses(h)
    except pynvml.NVMLError as e: m = str(e)
    print("compute", fmt(c), "mps", m if isinstance(m, str) else fmt(m), {p.pid: comm(p.pid) for p in c}, flush=True)
PY
python3 "$OUT/lists.py" > "$OUT/nvml-lists.txt" 2>&1 &
LISTS=$!
"$BIN" --config "$OUT/colloc.toml" run --mode mps -j 3 -f "$OUT/runs.toml" \
    --interval 200ms --report-dir "$OUT/run" > "$OUT/run.txt" 2>&1
echo "run exit $?" >> "$OUT/run.txt"
wait $LISTS
"$BIN" --config "$OUT/colloc.toml" bench --modes mps --counts 2 --repeat 1 \
    --duration 6s --warmup 2s --report-dir "$OUT/bench" \
    -- python3 "$OUT/hold.py" 1 60 > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"
python3 - "$OUT" <<'PY' > "$OUT/summary.txt" 2>&1
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/run/colloc-report.json"))
for run in r["runs"]:
    g = run.get("gpu") or {}
    print("run", run["name"], "peak MiB", (g.get("peak_memory_bytes") or 0) >> 20)
for g in r.get("gpus") or []:
    print("gpu", g.get("uuid"), "mps server MiB", (g.get("mps_server_peak_bytes") or 0) >> 20,
          "others MiB", (g.get("others_peak_bytes") or 0) >> 20)
b = json.load(open(f"{d}/bench/bench.json"))
for row in b["results"]:
    for m in row["measurements"]:
        print("bench", row["mode"], row["n"], "peak MiB", (m.get("peak_memory_bytes") or 0) >> 20,
              "copies", [(x or 0) >> 20 for x in m.get("copy_peak_memory_bytes", [])],
              "server MiB", (m.get("mps_server_bytes") or 0) >> 20)
PY
cat "$OUT/summary.txt"
