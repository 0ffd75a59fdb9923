#!/bin/bash
# A second real Slurm for the tests: a Debian 13 (trixie) root with Debian's Slurm 24.11,
# and a way to run any command (a test binary, cluster.sh, the demo) inside it, on this
# host's kernel, beside the host's own Slurm. Needs root (debootstrap, mounts, chroot).
#
#   slurm-root.sh make [ROOT]         make the root if it is not complete (cached: a root
#                                     made once is reused; an interrupted one is made again)
#   slurm-root.sh exec ROOT -- CMD... run CMD inside ROOT (see below); its exit status
#   slurm-root.sh test [TEST...]      run the real-Slurm suites (tests/slurm/tests/TEST.rs,
#                                     every one when none is named) inside the default
#                                     ROOT, made first if needed, under the profile of
#                                     $COLLOC_CLUSTER_PROFILE (default simple)
#   slurm-root.sh prepare             make the root and build what `test` runs (so that
#                                     tests of two profiles started at once build nothing)
#   slurm-root.sh path                print the default ROOT
#
# ROOT defaults to $COLLOC_SLURM_ROOT, else /var/cache/colloc-test/slurm-24.11. Only
# Debian's archive is used (debootstrap --variant=minbase, then apt-get inside the root).
#
# test: builds the workspace with the plugin against the root's Slurm headers into
# $TARGET/slurm-RELEASE (debug, and the test-seams plugin the panic test loads: the
# host's own builds are not touched) and the suites' binaries (cargo test --no-run: they
# are run inside the root, whose C library is newer), then runs each suite in the root
# with COLLOC_SPANK_PLUGIN and COLLOC_SPANK_TEST_PLUGIN on those plugins, COLLOC_BIN on
# that colloc and COLLOC_FAKE_NVML_LIB/_CTL on its fake libnvidia-ml and control tool. Output is each suite's own ("test result: …" lines);
# the exit status is 0 when every suite passed.
#
# exec: CMD runs in a mount namespace of its own whose root is an overlay of ROOT (the
# cached root stays as made: what CMD writes into the root's own folders, test accounts
# included, goes with the namespace). Inside it, at the same absolute paths as on the
# host: /proc (fresh), /sys with its cgroup mounts, /dev with /dev/pts and /dev/shm, /tmp,
# /var/tmp, the current folder's checkout (the git top level, else the current folder),
# $CARGO_TARGET_DIR when set, and the folders of $COLLOC_SLURM_ROOT_BINDS (colon list);
# /run is fresh. The root's /etc/passwd, group, shadow and gshadow get the host's
# ordinary accounts (uid 1000 to 60000) that the root does not have, so a test account the
# host's suites made has the same uid in both. The environment passes through unchanged
# (PATH is the root's). The namespace ends with CMD: nothing stays mounted on the host.
set -euo pipefail

DEFAULT_ROOT=/var/cache/colloc-test/slurm-24.11
SELF=$(realpath "${BASH_SOURCE[0]}")
SUITE=trixie
MIRROR=http://deb.debian.org/debian
# Slurm 24.11 and munge; the cgroup, task and job container plugins are in
# slurm-wlm-basic-plugins (slurmd's dependency). python3, gcc (the SPANK probe plugin,
# built against this root's headers), procps: what the suites run inside jobs and tests.
# slurmdbd and MariaDB's server and client (the server alone: no service, no system
# database) for clusters started with accounting (tests/slurm/accounting.sh).
PACKAGES=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libslurm-dev
  python3 gcc libc6-dev procps slurmdbd mariadb-server-core mariadb-client-core)
# Written last by make: a root without it is incomplete and made again.
STAMP=.colloc-slurm-root

die() { echo "slurm-root.sh: $*" >&2; exit 1; }
usage() {
  echo "usage: slurm-root.sh make [ROOT] | exec ROOT -- CMD [ARGS...] | prepare | test [TEST...] | path" >&2
  exit 2
}

stamp_text() { printf '%s\n' "$SUITE ${PACKAGES[*]}"; }

make_root() {
  local root=$1
  [[ $(id -u) == 0 ]] || die "needs root (debootstrap, chroot)"
  mkdir -p "$(dirname "$root")"
  # One maker at a time (tests of two profiles may start at once); the others wait and
  # then find the root ready.
  exec 9>"$root.lock"
  flock 9
  if [[ -f $root/$STAMP && $(cat "$root/$STAMP") == "$(stamp_text)" ]]; then
    echo "slurm-root.sh: $root is ready ($(chroot "$root" dpkg-query -W -f '${Version}' slurmd))"
    exec 9>&-
    return
  fi
  command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
  # A root made for another package list (another stamp) is made again; an interrupted
  # make left only ROOT.new.PID, removed here; a folder without the stamp that is not
  # empty is not this script's and is left alone.
  if [[ -e $root ]]; then
    [[ -f $root/$STAMP || -z $(ls -A "$root") ]] ||
      die "$root is not a root this script made: not removing it (set COLLOC_SLURM_ROOT)"
    rm -rf --one-file-system "${root:?}"
  fi
  rm -rf --one-file-system "${root:?}".new.*
  local new=$root.new.$$
  rm -rf --one-file-system "$new"
  echo "slurm-root.sh: debootstrap $SUITE into $root"
  debootstrap --variant=minbase "$SUITE" "$new" "$MIRROR" >"$new.log" 2>&1 ||
    { tail -20 "$new.log" >&2; die "debootstrap failed (log: $new.log)"; }
  # No daemon starts on installation (there is no init here either).
  printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"
  chmod 755 "$new/usr/sbin/policy-rc.d"
  # apt inside the root needs /proc and /dev for a few maintainer scripts; a namespace
  # of its own so nothing stays mounted.
  unshare -m --propagation private sh -c '
    mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" &&
    cp /etc/resolv.conf "$0/etc/resolv.conf" &&
    DEBIAN_FRONTEND=noninteractive chroot "$0" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive chroot "$0" apt-get install -y -qq --no-install-recommends "$@"' \
    "$new" "${PACKAGES[@]}" >>"$new.log" 2>&1 ||
    { tail -20 "$new.log" >&2; die "apt-get install in the root failed (log: $new.log)"; }
  chroot "$new" apt-get clean
  rm -f "$new.log"
  stamp_text >"$new/$STAMP"
  mv "$new" "$root"
  echo "slurm-root.sh: $root made ($(chroot "$root" dpkg-query -W -f '${Version}' slurmd))"
  exec 9>&-
}

# Append to the root's account file $2 the host's lines of $1 whose name the root lacks:
# every such line when $3 is 0 (shadow, gshadow: only names passwd or group now have),
# else those whose id (field 3) is an ordinary account's.
merge_accounts() {
  local host=$1 mine=$2 ordinary=$3 names=$4
  awk -F: -v mine="$mine" -v ordinary="$ordinary" -v names="$names" '
    BEGIN {
      while ((getline l < mine) > 0) { split(l, a, ":"); have[a[1]] = 1 }
      n = split(names, k, " "); for (i = 1; i <= n; i++) known[k[i]] = 1
    }
    !($1 in have) && (ordinary ? ($3 >= 1000 && $3 <= 60000) : ($1 in known)) { print }
  ' "$host" >>"$mine"
}

# Run in exec_in's new mount namespace: ROOT CWD N BIND... -- CMD...
in_namespace() {
  local root=$1 cwd=$2 n=$3
  shift 3
  local binds=("${@:1:n}")
  shift "$n"
  shift # --
  # The overlay's own folders: on a tmpfs over /run, in this namespace only.
  mount -t tmpfs -o mode=0755 colloc-slurm-root /run
  mkdir -p /run/upper /run/work /run/merged
  mount -t overlay overlay -o "lowerdir=$root,upperdir=/run/upper,workdir=/run/work" /run/merged
  local m=/run/merged b
  mount -t proc proc "$m/proc"
  mount --rbind /sys "$m/sys"
  mount --rbind /dev "$m/dev"
  mount -t tmpfs -o mode=0755 tmpfs "$m/run"
  mkdir -p -m 1777 "$m/run/lock"
  for b in "${binds[@]}"; do
    [[ -d $b ]] || continue
    mkdir -p "$m$b"
    mount --rbind "$b" "$m$b"
  done
  merge_accounts /etc/passwd "$m/etc/passwd" 1 ""
  merge_accounts /etc/group "$m/etc/group" 1 ""
  merge_accounts /etc/shadow "$m/etc/shadow" 0 "$(cut -d: -f1 "$m/etc/passwd" | paste -sd' ')"
  merge_accounts /etc/gshadow "$m/etc/gshadow" 0 "$(cut -d: -f1 "$m/etc/group" | paste -sd' ')"
  cp /etc/hosts "$m/etc/hosts"
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  # The overlay becomes this namespace's root mount (pivot_root, the old root detached),
  # not a chroot: a process that enters a mount namespace made from this one (nsenter
  # into a node's, slurmstepd into a job container's) gets that namespace's root, which
  # for a chroot would be the host's tree (seen: the host's 22.05 srun inside 24.11 jobs).
  cd "$m"
  pivot_root . .
  umount -l .
  # shellcheck disable=SC2016 # expanded by that sh
  exec /bin/sh -c 'cd "$0" && exec "$@"' "$cwd" "$@"
}

exec_in() {
  local root=$1
  shift
  [[ $(id -u) == 0 ]] || die "needs root (mounts, pivot_root)"
  [[ -f $root/$STAMP ]] || die "$root is not a complete root (slurm-root.sh make $root)"
  root=$(realpath "$root")
  local top
  top=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
  local binds=("$top" /tmp /var/tmp) extra b
  [[ -n ${CARGO_TARGET_DIR:-} ]] && binds+=("$(realpath -m "$CARGO_TARGET_DIR")")
  IFS=: read -r -a extra <<<"${COLLOC_SLURM_ROOT_BINDS:-}"
  for b in "${extra[@]}"; do [[ -n $b ]] && binds+=("$(realpath -m "$b")"); done
  unshare -m --propagation private bash -c "set -euo pipefail; $(declare -f merge_accounts in_namespace); in_namespace \"\$@\"" \
    in_namespace "$root" "$(pwd)" "${#binds[@]}" "${binds[@]}" -- "$@"
}

# The release (major.minor) of the root's Slurm, e.g. 24.11.
root_release() { chroot "$1" dpkg-query -W -f '${Version}' slurmd | sed -E 's/^([0-9]+\.[0-9]+).*/\1/'; }

# Set root, top, target, release and tdir for the default ROOT (made if needed), and build
# what the suites load there, all in a target folder of its own, $TARGET/slurm-RELEASE
# (tdir): the plugin against the root's headers, the workspace (colloc, the fake
# libnvidia-ml, the stand-ins) and the suites' binaries (listed in $exes: "name path"
# lines). A folder of its own, because `cargo build` and `cargo test` of the host's
# workspace rebuild target/debug's fake libnvidia-ml in turn (their features differ),
# and scripts/test.sh runs those beside the suites here. With COLLOC_SLURM_ROOT_BUILT=1
# (the caller ran `prepare` already) only the suites are listed: two suites started at
# once build nothing under each other. With COLLOC_SLURM_ROOT_HOST_BUILDS=DIR
# (scripts/test.sh, which builds all of it on the host anyway) only the two plugins are
# built here; colloc, the fake libnvidia-ml and its control tool are copied from DIR and
# the suites are the binaries DIR/suites lists.
prepare() {
  root=$(realpath -m "${COLLOC_SLURM_ROOT:-$DEFAULT_ROOT}")
  make_root "$root"
  top=$(cd "$(dirname "$SELF")/../.." && pwd)
  cd "$top"
  target=$(realpath -m "${CARGO_TARGET_DIR:-$top/target}")
  release=$(root_release "$root")
  tdir=$target/slurm-$release
  # Only for cargo: the suites get each artifact's path (run_tests), and a
  # CARGO_TARGET_DIR in their environment made exec bind that folder a second time inside
  # the root, where requeued jobs of the production profile then failed to join their
  # job container (container_p_join: .ns missing; launch failed requeued held).
  local build=(env SLURM_INCLUDE_DIR="$root/usr/include" CARGO_TARGET_DIR="$tdir" cargo)
  if [[ -n ${COLLOC_SLURM_ROOT_HOST_BUILDS:-} ]]; then
    # Only the plugin reads Slurm's headers: everything else is the host's build (its C
    # library is older than the root's), copied from that folder, and the suites are the
    # host's binaries listed there in `suites` ("name path" lines).
    local host=$COLLOC_SLURM_ROOT_HOST_BUILDS f
    [[ -s $host/suites ]] || die "$host/suites: no suites listed"
    if [[ ${COLLOC_SLURM_ROOT_BUILT:-} != 1 ]]; then
      echo "slurm-root.sh: building the plugin for Slurm $release into $tdir (the rest: $host)"
      # The test-seams plugin first, then the plain one: one build of the dependencies.
      "${build[@]}" build --locked -q -p colloc-spank --features test-seams &&
        mkdir -p "$tdir/test-seams" &&
        cp "$tdir/debug/libcolloc_spank.so" "$tdir/test-seams/libcolloc_spank.so.new" &&
        mv "$tdir/test-seams/libcolloc_spank.so.new" "$tdir/test-seams/libcolloc_spank.so" &&
        "${build[@]}" build --locked -q -p colloc-spank ||
        die "the plugin did not build against Slurm $release's headers"
      for f in colloc libfake_nvml.so fake-nvml-ctl; do
        cp "$host/$f" "$tdir/debug/$f.new" && mv "$tdir/debug/$f.new" "$tdir/debug/$f" ||
          die "no $host/$f"
      done
    fi
    exes=$(cat "$host/suites")
    return 0
  fi
  if [[ ${COLLOC_SLURM_ROOT_BUILT:-} != 1 ]]; then
    echo "slurm-root.sh: building the workspace for Slurm $release into $tdir"
    "${build[@]}" build --locked -q --workspace &&
      "${build[@]}" build --locked -q -p colloc-spank --features test-seams --profile test-seams ||
      die "the workspace did not build against Slurm $release's headers"
  fi
  exes=$("${build[@]}" test --locked -q -p colloc-slurm-tests --tests --no-run --message-format=json |
    "$(dirname "$SELF")/suites.sh" list) || die "the suites did not build"
}

run_tests() {
  local root top target release tdir exes
  prepare
  COLLOC_SPANK_PLUGIN=$tdir/debug/libcolloc_spank.so \
    COLLOC_SPANK_TEST_PLUGIN=$tdir/test-seams/libcolloc_spank.so \
    COLLOC_BIN=$tdir/debug/colloc \
    COLLOC_FAKE_NVML_LIB=$tdir/debug/libfake_nvml.so \
    COLLOC_FAKE_NVML_CTL=$tdir/debug/fake-nvml-ctl \
    "$(dirname "$SELF")/suites.sh" run <(printf '%s\n' "$exes") "$release" "$@" -- "$SELF" exec "$root" --
}

# The whole file is read before anything runs (main's last line is on the line that calls
# it): a run whose script is edited meanwhile goes on with what it read.
main() {
  cmd=${1:-}
  [[ -n $cmd ]] || usage
  shift
  case $cmd in
    make)
      (($# <= 1)) || usage
      make_root "$(realpath -m "${1:-${COLLOC_SLURM_ROOT:-$DEFAULT_ROOT}}")"
      ;;
    exec)
      (($# >= 3)) && [[ $2 == -- ]] || usage
      r=$1
      shift 2
      exec_in "$r" "$@"
      ;;
    prepare) (($# == 0)) || usage; prepare ;;
    test) run_tests "$@" ;;
    path) (($# == 0)) || usage; echo "${COLLOC_SLURM_ROOT:-$DEFAULT_ROOT}" ;;
    *) usage ;;
  esac
}
main "$@"; exit
