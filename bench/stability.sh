#!/usr/bin/env bash
# Is `colloc bench` repeatable? One call of the issue-15 check on a GPU: the small and the
# medium ResNet of bench/train.py at batch 128, each measured by
#
#   colloc bench --modes mps --counts auto --repeat 2 --budget B \
#     --reference 'train.py ... --batch BIG' -- train.py ... --batch 128
#
# under MPS (colloc starts and stops its own private MPS daemon, no Slurm or root
# needed), with a one-process reference at a big batch in the same call. Run it in two
# separate device calls and compare the two OUTDIRs with bench/stability-compare.py:
# the recommended ratio should agree within 5 % and the chosen N be the same or one
# step of --counts auto apart.
#
#   COLLOC=target/release/colloc bash bench/stability.sh OUTDIR
#
# OUTDIR: colloc.toml, env.txt (host, GPU, driver; one block a call), timing.txt (exit
# and wall seconds of each workload), stability.log, mps-left.txt (MPS processes of this
# script left after each call: must say none), and small-b128/, medium-b128/ (bench.json,
# bench.csv, bench-measurements.csv, bench.png, table.txt, stderr.txt, command.txt,
# logs/). A workload's folder must not exist yet; the text files are appended to, so
# one run's workloads may come from separate calls (WORKLOADS=small, then
# WORKLOADS=medium, into the same OUTDIR) when one call may not last long enough.
#
# Time: SMALL_BUDGET (370 s) + MEDIUM_BUDGET (300 s) of colloc bench, each capped at its
# budget + 20 s by `timeout` (SIGTERM: colloc still writes what it measured), plus ~10 s
# of setup. One configuration on the H200 takes ~20 s of wall time (Python, torch and
# timm start-up, the CUDA context and cuDNN autotuning, then WARMUP + DURATION), and
# --repeat 2 measures each twice: the small model's search (solo 3 times, the reference
# twice, 2, 4, 7 and 10 copies twice, mps:7 twice) needs about 340 s on a warm machine,
# the medium's (up to 7 copies) about 300 s. Smaller budgets cut the --counts auto
# search short: the report names what was skipped, and says when the search was cut
# while the aggregate still rose. WORKLOADS=small (or medium) runs one workload alone.
# The small model's reference runs at batch 2048: at 896 (64-93 steps a second) it
# moved 30 % between two calls (57,300-83,400 img/s), as host-bound as solo; the
# medium model's at 512 held to 0.1 %.
# Env: PYTHON (python3), WARMUP (2s), DURATION (4s), SMALL_BUDGET, MEDIUM_BUDGET (s),
# SMALL_REF_BATCH (2048 = 16 x 128), MEDIUM_REF_BATCH (512 = 4 x 128), MODES (mps),
# COUNTS (auto; a list such as 4,7,10 for a fixed search), REPEAT (2), NO_BUDGET (1: no --budget),
# MPS_CONTROL (the control program; default: the driver's, found as in bench/study.sh),
# TRAIN (the training script, bench/train.py; a stand-in to test this script's plumbing).
#
# Every MPS daemon colloc starts lives under a private TMPDIR of this script; on exit,
# also after a failure or a signal, the script stops colloc (SIGTERM: it stops its copies
# and daemons), then quits any daemon still in that TMPDIR and kills what remains of it
# (processes whose CUDA_MPS_PIPE_DIRECTORY is in that TMPDIR, by pid). It never changes
# GPU settings.
set -euo pipefail

OUT=${1:?usage: COLLOC=... bash bench/stability.sh OUTDIR}
PYTHON=${PYTHON:-python3}
WARMUP=${WARMUP:-2s}
DURATION=${DURATION:-4s}
SMALL_BUDGET=${SMALL_BUDGET:-370}
MEDIUM_BUDGET=${MEDIUM_BUDGET:-300}
WORKLOADS=${WORKLOADS:-small medium}
SMALL_REF_BATCH=${SMALL_REF_BATCH:-2048}
MEDIUM_REF_BATCH=${MEDIUM_REF_BATCH:-512}
MODES=${MODES:-mps}
COUNTS=${COUNTS:-auto}
REPEAT=${REPEAT:-2}
# NO_BUDGET=1: no --budget (the unbudgeted search issue 36 compares against); the
# workload's budget then only caps colloc's wall time (timeout, as below).
NO_BUDGET=${NO_BUDGET:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
TRAIN=${TRAIN:-$HERE/train.py}

find_colloc
for v in SMALL_BUDGET MEDIUM_BUDGET SMALL_REF_BATCH MEDIUM_REF_BATCH; do
  if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "stability.sh: $v must be a whole number, got ${!v}" >&2
    exit 2
  fi
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
for d in small-b128 medium-b128; do
  if [[ -e "$OUT/$d" ]]; then
    echo "stability.sh: $OUT/$d exists; give an empty OUTDIR" >&2
    exit 2
  fi
done

MPSCTL=
for p in ${MPS_CONTROL:-} /usr/local/nvidia/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control; do
  if [[ -x "$p" ]]; then MPSCTL=$p; break; fi
done
# A node config for this machine: NVML and the MPS control program by absolute path
# where the driver keeps them outside the default search path.
CONF="$OUT/colloc.toml"
{
  echo "version = 1"
  echo 'allowed_modes = ["naive", "mps", "mig"]'
  for lib in /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; do
    if [[ -e "$lib" ]]; then echo "nvml_library = \"$lib\""; break; fi
  done
  if [[ -n "$MPSCTL" ]]; then echo "mps_control = \"$MPSCTL\""; fi
} >"$CONF"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
unset COLLOC_MODE COLLOC_DEVICES COLLOC_SLOTS SLURM_JOB_ID SLURM_RESTART_COUNT

# colloc's MPS daemons go under $SCRATCH (PrivateDaemon: $TMPDIR/colloc-bench-PID-N).
SCRATCH=$(mktemp -d /tmp/colloc-stability.XXXXXX)
export TMPDIR=$SCRATCH
# Appended to, so that the workloads of one run can come from separate calls
# (WORKLOADS=small, then WORKLOADS=medium, into the same OUTDIR).
LOG="$OUT/stability.log"
touch "$LOG"
PID=

# Processes whose CUDA_MPS_PIPE_DIRECTORY lies under $SCRATCH (this script's daemons).
ours() {
  local e comm
  for e in /proc/[0-9]*; do
    comm=$(cat "$e/comm" 2>/dev/null) || continue
    [[ $comm == nvidia-cuda-mps* ]] || continue
    if { tr '\0' '\n' <"$e/environ"; } 2>/dev/null |
      grep -q "^CUDA_MPS_PIPE_DIRECTORY=$SCRATCH/"; then
      echo "${e#/proc/}"
    fi
  done
}

cleanup() {
  local rc=$? d p i
  trap - EXIT INT TERM
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    echo "stability.sh: stopping colloc ($PID)" | tee -a "$LOG"
    kill -TERM "$PID" 2>/dev/null || true
    for i in $(seq 1 40); do kill -0 "$PID" 2>/dev/null || break; sleep 1; done
    kill -KILL "$PID" 2>/dev/null || true
  fi
  for d in "$SCRATCH"/colloc-bench-*; do
    [[ -d "$d/pipe" && -n "$MPSCTL" ]] || continue
    echo "stability.sh: quitting the MPS daemon in $d" | tee -a "$LOG"
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log" \
      timeout 15 "$MPSCTL" >/dev/null 2>&1 || true
  done
  for i in 1 2 3 4 5; do [[ -z "$(ours)" ]] && break; sleep 1; done
  for p in $(ours); do
    echo "stability.sh: killing MPS process $p left by this script" | tee -a "$LOG"
    kill -KILL "$p" 2>/dev/null || true
  done
  sleep 1
  local left
  left=$(ours | tr '\n' ' ')
  echo "MPS processes of this script left ($WORKLOADS): ${left:-none}" | tee -a "$OUT/mps-left.txt" "$LOG"
  rm -rf "$SCRATCH"
  echo "stability.sh: exit $rc after $SECONDS s; outputs in $OUT" | tee -a "$LOG"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

{
  echo "== workloads: $WORKLOADS"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(cat /proc/sys/kernel/hostname) $(uname -srm)"
  echo "colloc: $("$COLLOC" --version 2>&1)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode --format=csv 2>&1 || true
  echo "cpu: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "warmup: $WARMUP, duration: $DURATION, modes: $MODES"
  echo "budgets: small $SMALL_BUDGET s, medium $MEDIUM_BUDGET s"
} >>"$OUT/env.txt" 2>&1
touch "$OUT/timing.txt"

# run NAME WORKLOAD REF_BATCH BUDGET_S
run() {
  local name=$1 workload=$2 refbatch=$3 budget=$4
  local dir="$OUT/$name"
  mkdir -p "$dir"
  # Lines every 0.5 s: a 4 s window then has 8 per copy, enough to cut it into blocks
  # for the noise inside the window.
  local train=("$PYTHON" "$TRAIN" --workload "$workload" --duration 0 --log-interval 0.5)
  local reference
  reference=$(printf '%q ' "${train[@]}" --batch "$refbatch")
  local budget_arg=(--budget "${budget}s")
  [[ $NO_BUDGET == 1 ]] && budget_arg=()
  local cmd=("$COLLOC" --config "$CONF" bench --modes "$MODES" --counts "$COUNTS" --repeat "$REPEAT"
    "${budget_arg[@]}" --warmup "$WARMUP" --duration "$DURATION" --startup-timeout 90s
    --reference "$reference" --report-dir "$dir" -- "${train[@]}" --batch 128)
  printf '%q ' "${cmd[@]}" >"$dir/command.txt"
  echo >>"$dir/command.txt"
  echo "== $name: $(cat "$dir/command.txt")" | tee -a "$LOG"
  local start=$SECONDS rc=0
  timeout --signal=TERM --kill-after=15 "$((budget + 20))" "${cmd[@]}" \
    >"$dir/table.txt" 2>"$dir/stderr.txt" &
  PID=$!
  wait "$PID" || rc=$?
  PID=
  tee -a "$LOG" <"$dir/table.txt"
  echo "$name exit $rc wall_s $((SECONDS - start)) budget_s $budget" | tee -a "$OUT/timing.txt" "$LOG"
}

for w in $WORKLOADS; do
  case $w in
    small) run small-b128 small "$SMALL_REF_BATCH" "$SMALL_BUDGET" ;;
    medium) run medium-b128 medium "$MEDIUM_REF_BATCH" "$MEDIUM_BUDGET" ;;
    *) echo "stability.sh: unknown workload $w in WORKLOADS (small, medium)" >&2; exit 2 ;;
  esac
done
