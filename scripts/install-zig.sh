#!/usr/bin/env bash
# Install the tools the release build uses, when missing (safe to rerun): zig and
# cargo-zigbuild from PyPI, which build colloc's binaries against glibc 2.28, so the
# packages install on RHEL/Rocky/Alma 8 and 9 as on Debian 12 (packaging/README.md).
# Versions are pinned: a zig release can change what it links.
set -euo pipefail
ZIGLANG=0.13.0.post1
CARGO_ZIGBUILD=0.20.1

have() { python3 -m pip show "$1" 2>/dev/null | grep -qx "Version: $2"; }
if have ziglang "$ZIGLANG" && have cargo-zigbuild "$CARGO_ZIGBUILD" && command -v cargo-zigbuild >/dev/null; then
  exit 0
fi
command -v python3 >/dev/null || { echo "install-zig.sh: python3 missing (scripts/install-deps.sh)" >&2; exit 1; }
if ! python3 -m pip --version >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi
# Debian's own Python refuses system-wide pip installs (PEP 668) unless told otherwise;
# these two packages bring their own files only (a zig tree, one binary).
echo "installing ziglang==$ZIGLANG cargo-zigbuild==$CARGO_ZIGBUILD (PyPI)"
python3 -m pip install -q --disable-pip-version-check --break-system-packages \
  "ziglang==$ZIGLANG" "cargo-zigbuild==$CARGO_ZIGBUILD" 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check \
    "ziglang==$ZIGLANG" "cargo-zigbuild==$CARGO_ZIGBUILD"
command -v cargo-zigbuild >/dev/null || {
  echo "install-zig.sh: cargo-zigbuild installed but not on PATH ($(python3 -m site --user-base)/bin?)" >&2
  exit 1
}
