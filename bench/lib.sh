# Shared by the GPU benchmarks: `source "$HERE/lib.sh"` (HERE: the bench folder).

# find_colloc: COLLOC as given, else target/release or target/debug of this checkout;
# made absolute. Exits when there is none.
find_colloc() {
  if [[ -z "${COLLOC:-}" ]]; then
    for c in "$HERE/../target/release/colloc" "$HERE/../target/debug/colloc"; do
      if [[ -x "$c" ]]; then COLLOC=$c; break; fi
    done
  fi
  : "${COLLOC:?no colloc binary: cargo build --release -p colloc, or set COLLOC}"
  COLLOC=$(cd "$(dirname "$COLLOC")" && pwd)/$(basename "$COLLOC")
}

# write_node_config FILE: a node config for this machine, with NVML and the MPS control
# program by absolute path where the driver keeps them outside the default search path.
write_node_config() {
  {
    echo "version = 1"
    echo 'allowed_modes = ["naive", "mps", "mig"]'
    for lib in /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; do
      if [[ -e "$lib" ]]; then echo "nvml_library = \"$lib\""; break; fi
    done
    for p in /usr/local/nvidia/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control; do
      if [[ -x "$p" ]]; then echo "mps_control = \"$p\""; break; fi
    done
  } >"$1"
}
