#!/usr/bin/env bash
# Install the Debian packages colloc's build and tests need, when missing. Safe to rerun.
set -euo pipefail
pkgs=(
  slurmctld slurmd slurm-client munge libslurm-dev   # the real Slurm the tests run
  libclang1-14 libclang-common-14-dev                # bindgen for the SPANK plugin
  dpkg-dev rpm man-db groff-base binutils cpio       # packages, man pages, objdump
  python3-pip                                        # zig and cargo-zigbuild (install-zig.sh)
  parallel fonts-dejavu-core python3                 # benchmarks, report charts
  debootstrap                                        # the Slurm 24.11 root (tests/slurm/slurm-root.sh)
  chromium                                           # colloc report --html, read in a headless browser
  python3-prometheus-client                          # status --format openmetrics checked by a real parser
  mariadb-server-core mariadb-client-core slurmdbd   # Slurm accounting of the test clusters (tests/slurm/accounting.sh)
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  # No system daemon may start from this (slurmdbd's postinst starts Debian's own slurmdbd
  # through invoke-rc.d; the test clusters start their own MariaDB and slurmdbd on
  # loopback): where the machine has no policy-rc.d, one that refuses every start while
  # apt runs. (MariaDB comes as mariadb-server-core: the server without a service or a
  # system database, so there is none to start.)
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ -n "$made_policy" ]; then
    $SUDO rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  fi
fi
# The release build's tool chain (glibc 2.28 binaries): zig and cargo-zigbuild.
"$(dirname "$0")/install-zig.sh"
