#!/usr/bin/env bash
# How long after an MPS daemon and its server end does NVML stop listing the server?
# Starts a daemon as nobody in a private directory, one CUDA client (so a server
# exists), then ends them by SIGKILL (as Slurm's kill of an extern step does) or by `quit`
# (as colloc's epilog asks without PrologFlags=Contain), and polls NVML's process list.
# The prolog's wait for exited processes (reconfig::EXITING_GRACE) rests on this.
#
#   sudo bash bench/mps-release.sh kill|quit
#
# Never changes a GPU setting; stops the daemon it started. Needs root, setpriv, PyTorch
# importable by nobody.
set -uo pipefail
MODE=${1:?usage: mps-release.sh kill|quit}
d=$(mktemp -d /var/tmp/colloc-mps-release.XXXXXX)
mkdir -p "$d/pipe" "$d/log"
chown -R 65534:65534 "$d"
user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
daemon_env=(env -i PATH=/usr/bin:/bin HOME=/ CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log")
"${user[@]}" "${daemon_env[@]}" nvidia-cuda-mps-control -d
sleep 0.5
"${user[@]}" env HOME=/tmp CUDA_MPS_PIPE_DIRECTORY="$d/pipe" python3 -c \
    "import torch; x = torch.ones(10, device='cuda'); print('client:', float(x.sum()))"
sleep 0.2
srv=$(pgrep -f nvidia-cuda-mps-server)
ctl=$(pgrep -f "nvidia-cuda-mps-control -d")
echo "server $srv, control daemon $ctl; NVML lists: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')"
t0=$(date +%s%N)
if [ "$MODE" = kill ]; then
    kill -9 "$ctl" "$srv"
else
    echo quit | "${user[@]}" "${daemon_env[@]}" nvidia-cuda-mps-control
fi
for _ in $(seq 100); do
    apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')
    echo "$(( ($(date +%s%N) - t0) / 1000000 )) ms: NVML lists [$apps], server state [$(ps -o stat= -p "$srv" 2>/dev/null)]"
    [ -z "$apps" ] && break
    sleep 0.05
done
echo quit | "${user[@]}" "${daemon_env[@]}" nvidia-cuda-mps-control 2>/dev/null
rm -rf "$d"
