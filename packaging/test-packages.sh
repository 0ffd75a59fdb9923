#!/bin/bash
# Build the colloc .deb and .rpm, check what they hold, install the .deb on this machine
# (root, Debian) and check the installed files, the man pages, that an upgrade and a
# reinstall keep the admin's /etc/slurm/colloc.toml, and that removal while a job
# journal exists restores the GPU first (on the fake libnvidia-ml) or refuses.
#
#   packaging/test-packages.sh            (as root)
#   COLLOC_PREBUILT=1 ...                 use target/release as it is
#   COLLOC_TEST_KEEP_INSTALLED=0 ...      purge the package at the end
#
# By default the package is left installed with its pristine configuration, so that the
# Slurm integration tests can run against the installed files:
#   COLLOC_SPANK_PLUGIN=/usr/lib/<multiarch>/slurm-wlm/libcolloc_spank.so COLLOC_BIN=/usr/bin/colloc
# Ends with "N passed, N failed"; exits 0 only when nothing failed.
set -uo pipefail
# Whether /run/colloc was a mount point before this script installed anything: if not,
# the purge must leave none (the install mounts a capped tmpfs there).
run_was_mounted=0
awk '$2 == "/run/colloc"' /proc/self/mounts | grep -q . && run_was_mounted=1
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

PASS=0
FAIL=0
ok() {
    PASS=$((PASS + 1))
    echo "ok   - $1"
}
not_ok() {
    FAIL=$((FAIL + 1))
    echo "FAIL - $1"
    [ $# -gt 1 ] && printf '%s\n' "$2" | sed -n '1,20s/^/       /p'
    return 0
}
# check NAME CMD...: CMD must exit 0.
check() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then ok "$name"; else not_ok "$name" "$out"; fi
}
# check_fails NAME CMD...: CMD must exit non-zero.
check_fails() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then not_ok "$name (it succeeded)" "$out"; else ok "$name"; fi
}
finish() {
    echo "$PASS passed, $FAIL failed"
    [ "$FAIL" -eq 0 ]
    exit
}
elapsed() { echo $(($(date +%s) - $1)); }

[ "$(id -u)" -eq 0 ] || { echo "test-packages.sh installs packages: run it as root" >&2; exit 2; }

# Tools, by Debian package name (installed where missing).
need=()
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v rpmbuild >/dev/null || need+=(rpm)
command -v man >/dev/null || need+=(man-db)
command -v groff >/dev/null || need+=(groff-base)
command -v jq >/dev/null || need+=(jq)
command -v strip >/dev/null && command -v objdump >/dev/null || need+=(binutils)
command -v cpio >/dev/null || need+=(cpio)
# Build: Slurm headers for the plugin, libclang for bindgen; install: the Slurm it needs.
[ -r /usr/include/slurm/slurm_version.h ] || need+=(libslurm-dev)
dpkg -s slurm-wlm-basic-plugins >/dev/null 2>&1 || need+=(slurm-wlm-basic-plugins)
ls /usr/lib/*/libclang-*.so* /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 ||
    need+=(libclang1-14 libclang-common-14-dev)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" ||
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"; }; } >/dev/null ||
        { echo "cannot install ${need[*]}" >&2; exit 2; }
fi

export DEBIAN_FRONTEND=noninteractive
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
PLUGIN=/usr/lib/$MULTIARCH/slurm-wlm/libcolloc_spank.so
WORK=$(mktemp -d /tmp/colloc-pkgtest.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------- build
t0=$(date +%s)
if DEB=$("$REPO/packaging/build-deb.sh" 2>"$WORK/build-deb.log" | tail -n 1) && [ -f "$DEB" ]; then
    ok "build-deb.sh builds $(basename "$DEB") ($(elapsed "$t0") s$([ "${COLLOC_PREBUILT:-0}" = 1 ] || echo ", release build included"))"
else
    not_ok "build-deb.sh" "$(tail -n 20 "$WORK/build-deb.log")"
    finish
fi
t0=$(date +%s)
if RPMS=$(COLLOC_PREBUILT=1 "$REPO/packaging/build-rpm.sh" 2>"$WORK/build-rpm.log") &&
    RPM=$(printf '%s\n' "$RPMS" | sed -n 1p) && SRPM=$(printf '%s\n' "$RPMS" | sed -n 2p) &&
    [ -f "$RPM" ] && [ -f "$SRPM" ]; then
    ok "build-rpm.sh builds $(basename "$RPM") and $(basename "$SRPM") ($(elapsed "$t0") s)"
else
    not_ok "build-rpm.sh" "$(tail -n 20 "$WORK/build-rpm.log")"
    RPM=
fi

# ---------------------------------------------------------------- .deb contents
# Each entry: path and its mode/owner as dpkg-deb -c shows them.
deb_list=$(dpkg-deb -c "$DEB")
has_entry() { # has_entry PERMS PATH
    printf '%s\n' "$deb_list" | awk -v p="$1" -v f="./$2" '$1 == p && $2 == "root/root" && ($6 == f || $6 == f "/") { found = 1 } END { exit !found }'
}
for e in \
    "-rwxr-xr-x usr/bin/colloc" \
    "-rw-r--r-- usr/lib/$MULTIARCH/slurm-wlm/libcolloc_spank.so" \
    "-rw-r--r-- etc/slurm/plugstack.conf.d/colloc.conf" \
    "-rw-r--r-- etc/slurm/colloc.toml" \
    "drwx------ var/lib/colloc" \
    "-rw-r--r-- usr/share/man/man1/colloc.1.gz" \
    "-rw-r--r-- usr/share/man/man5/colloc.toml.5.gz" \
    "-rw-r--r-- usr/share/man/man8/colloc-spank.8.gz" \
    "-rw-r--r-- usr/share/doc/colloc/copyright" \
    "-rw-r--r-- usr/share/doc/colloc/changelog.gz" \
    "-rw-r--r-- usr/share/doc/colloc/changelog.Debian.gz" \
    "-rw-r--r-- usr/lib/tmpfiles.d/colloc.conf" \
    "-rwxr-xr-x usr/libexec/colloc/colloc-pre-remove" \
    "-rwxr-xr-x usr/libexec/colloc/colloc-post-install" \
    "-rw-r--r-- usr/lib/systemd/system/colloc-check.service" \
    "-rw-r--r-- usr/lib/systemd/system/colloc-metrics.service" \
    "-rw-r--r-- usr/lib/systemd/system/colloc-metrics.timer" \
    "-rw-r--r-- usr/share/bash-completion/completions/colloc" \
    "-rw-r--r-- usr/share/zsh/vendor-completions/_colloc" \
    "-rw-r--r-- usr/share/fish/vendor_completions.d/colloc.fish" \
    "-rw-r--r-- usr/share/doc/colloc/SECURITY.md" \
    "-rw-r--r-- usr/share/doc/colloc/design.md" \
    "-rw-r--r-- usr/share/doc/colloc/admin.md" \
    "-rw-r--r-- usr/share/doc/colloc/multinode.md" \
    "-rw-r--r-- usr/share/doc/colloc/slurm-callbacks.md" \
    "-rw-r--r-- usr/share/doc/colloc/LICENSE-MIT" \
    "-rw-r--r-- usr/share/doc/colloc/LICENSE-APACHE" \
    "-rw-r--r-- usr/share/doc/colloc/examples/runs.toml" \
    "-rw-r--r-- usr/share/doc/colloc/examples/mps-pack.sbatch" \
    "-rw-r--r-- usr/share/doc/colloc/examples/slurm-conf/gres.conf" \
    "-rw-r--r-- usr/share/doc/colloc/examples/slurm-conf/job_submit.lua"; do
    if has_entry "${e%% *}" "${e#* }"; then ok "dpkg-deb -c: ${e#* } (${e%% *} root/root)"; else not_ok "dpkg-deb -c: ${e#* } (${e%% *} root/root)" "$deb_list"; fi
done
if [ -f "$REPO/README.md" ]; then
    check "dpkg-deb -c: usr/share/doc/colloc/README.md" has_entry -rw-r--r-- usr/share/doc/colloc/README.md
fi
# Every user example of slurm-conf/examples/ ships in examples/.
for f in "$REPO"/slurm-conf/examples/*; do
    check "dpkg-deb -c: example $(basename "$f")" has_entry -rw-r--r-- "usr/share/doc/colloc/examples/$(basename "$f")"
done
check "conffiles: colloc.toml and plugstack fragment" bash -c \
    "dpkg-deb -I '$DEB' conffiles | grep -qx /etc/slurm/colloc.toml && dpkg-deb -I '$DEB' conffiles | grep -qx /etc/slurm/plugstack.conf.d/colloc.conf"
slurm_version
depends=$(dpkg-deb -f "$DEB" Depends)
check "Depends: slurm-wlm-basic-plugins $SLURM_MAJMIN only, and libc" bash -c \
    "grep -qF 'slurm-wlm-basic-plugins (>= $SLURM_MAJMIN), slurm-wlm-basic-plugins (<< $SLURM_NEXT~)' <<<'$depends' && grep -q 'libc6 (>= ' <<<'$depends'"
check "plugstack line ships commented out, pointing at the plugin" bash -c \
    "dpkg-deb --fsys-tarfile '$DEB' | tar -xOf - ./etc/slurm/plugstack.conf.d/colloc.conf | grep -Eq '^#optional $PLUGIN( |\$)' &&
     ! dpkg-deb --fsys-tarfile '$DEB' | tar -xOf - ./etc/slurm/plugstack.conf.d/colloc.conf | grep -Eq '^[[:space:]]*(optional|required)'"
# libc6 from the binaries' real needs: the newest GLIBC_x.y they reference, no more.
mkdir -p "$WORK/libc6"
dpkg-deb -x "$DEB" "$WORK/libc6"
libc6_need=$(libc6_needed "$WORK/libc6/usr/bin/colloc" "$WORK/libc6$PLUGIN")
check "Depends: libc6 (>= $libc6_need), the newest GLIBC version the binaries reference (limit $GLIBC_MAX)" bash -c \
    "grep -qF 'libc6 (>= $libc6_need)' <<<'$depends' && [ \"\$(printf '%s\n%s\n' '$libc6_need' '$GLIBC_MAX' | sort -V | tail -n 1)\" = '$GLIBC_MAX' ]"
# The site's values (packaging/site.env) reach the package; no placeholder does.
check "control: Maintainer and Homepage from packaging/site.env" bash -c \
    "[ \"\$(dpkg-deb -f '$DEB' Maintainer)\" = '$COLLOC_MAINTAINER' ] && [ \"\$(dpkg-deb -f '$DEB' Homepage)\" = '$COLLOC_URL' ]"
check "installed SECURITY.md names the security contact of packaging/site.env" \
    grep -qxF -- "- Security contact: $COLLOC_SECURITY_CONTACT" "$WORK/libc6/usr/share/doc/colloc/SECURITY.md"
# shellcheck disable=SC2016 # expanded by the inner bash
check "no FILL IN anywhere in the .deb (files, control, changelogs)" bash -c \
    '! grep -rIqiE "fill[ -]in" "$0" && ! dpkg-deb -I "$1" | grep -qiE "fill[ -]in" &&
     ! zcat "$0"/usr/share/doc/colloc/*.gz | grep -qiE "fill[ -]in"' "$WORK/libc6" "$DEB"
# The boot unit: check-config --fix before slurmd, wanted by slurmd.
unit=$WORK/libc6/usr/lib/systemd/system/colloc-check.service
check "colloc-check.service: oneshot, ExecStart=/usr/bin/colloc check-config --fix, Before= and WantedBy=slurmd.service" bash -c \
    "grep -qx 'Type=oneshot' '$unit' && grep -qx 'ExecStart=/usr/bin/colloc check-config --fix' '$unit' &&
     grep -Eqx 'Before=(.* )?slurmd.service( .*)?' '$unit' && grep -qx 'WantedBy=slurmd.service' '$unit'"
if command -v systemd-analyze >/dev/null; then
    # Only the unit's own faults: the commands and slurmd.service are not on this host.
    if out=$(systemd-analyze verify --man=no "$unit" 2>&1 | grep -v -e 'slurmd.service' -e '/usr/bin/colloc' -e 'nvidia-persistenced'); [ -z "$out" ]; then
        ok "systemd-analyze verify colloc-check.service: no fault of its own"
    else
        not_ok "systemd-analyze verify colloc-check.service" "$out"
    fi
fi
# The metrics units: status --format openmetrics into node_exporter's textfile directory,
# every 15 s, atomically (--output); shipped, not enabled.
munit=$WORK/libc6/usr/lib/systemd/system/colloc-metrics
check "colloc-metrics.service: oneshot, ExecStart=/usr/bin/colloc status --format openmetrics --output ...; timer every 15s, WantedBy=timers.target" bash -c \
    "grep -qx 'Type=oneshot' '$munit.service' &&
     grep -qx 'ExecStart=/usr/bin/colloc status --format openmetrics --output /var/lib/prometheus/node-exporter/colloc.prom' '$munit.service' &&
     grep -qx 'OnUnitActiveSec=15s' '$munit.timer' && grep -qx 'WantedBy=timers.target' '$munit.timer'"
if command -v systemd-analyze >/dev/null; then
    if out=$(systemd-analyze verify --man=no "$munit.timer" "$munit.service" 2>&1 | grep -v -e '/usr/bin/colloc'); [ -z "$out" ]; then
        ok "systemd-analyze verify colloc-metrics.{service,timer}: no fault of their own"
    else
        not_ok "systemd-analyze verify colloc-metrics.{service,timer}" "$out"
    fi
fi
# The same post-install steps in both packages: one script, run by each.
check "deb postinst runs colloc-post-install" bash -c \
    "dpkg-deb -I '$DEB' postinst | grep -q '/usr/libexec/colloc/colloc-post-install install'"
if command -v lintian >/dev/null; then
    lintian_out=$(lintian --tag-display-limit 0 "$DEB" 2>&1 | grep -E '^E: ' || true)
    if [ -z "$lintian_out" ]; then ok "lintian: no errors"; else not_ok "lintian errors" "$lintian_out"; fi
fi

# ---------------------------------------------------------------- glibc 2.28 (EL8 and EL9)
# Every ELF file the packages hold needs at most GLIBC_$GLIBC_MAX (RHEL/Rocky 8 has 2.28,
# 9 has 2.34), and the RPM asks for nothing newer either.
EX=$WORK/extract
mkdir -p "$EX/deb" "$EX/rpm"
dpkg-deb -x "$DEB" "$EX/deb"
[ -n "${RPM:-}" ] && (cd "$EX/rpm" && rpm2cpio "$RPM" | cpio -idm --quiet 2>/dev/null)
for pkg in deb rpm; do
    [ "$pkg" = rpm ] && [ -z "${RPM:-}" ] && continue
    elfs=$(find "$EX/$pkg" -type f -exec sh -c 'head -c 4 "$1" | grep -q "ELF" && echo "$1"' _ {} \;)
    if [ -z "$elfs" ]; then
        not_ok "$pkg: holds ELF files to check"
        continue
    fi
    for f in $elfs; do
        need=$(glibc_needed "$f")
        if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$GLIBC_MAX" | sort -V | tail -n 1)" = "$GLIBC_MAX" ]; then
            ok "$pkg: ${f#"$EX/$pkg"} needs GLIBC_$need at most (limit $GLIBC_MAX)"
        else
            not_ok "$pkg: ${f#"$EX/$pkg"} needs GLIBC_${need:-?}, above $GLIBC_MAX"
        fi
    done
done
if [ -n "${RPM:-}" ]; then
    reqs=$(rpm -qp --requires "$RPM" 2>/dev/null)
    too_new=$(printf '%s\n' "$reqs" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV |
        awk -v max="$GLIBC_MAX" '{ split($0, a, "."); split(max, b, "."); if (a[1] > b[1] || (a[1] == b[1] && a[2] > b[2])) print }')
    if [ -z "$too_new" ] && printf '%s\n' "$reqs" | grep -q 'libc.so.6(GLIBC_'; then
        ok "rpm -qp --requires: no GLIBC version above $GLIBC_MAX"
    else
        not_ok "rpm -qp --requires: no GLIBC version above $GLIBC_MAX (too new: ${too_new:-none listed})" "$reqs"
    fi
    # Only libraries EL8's base system has (glibc, libgcc), and nothing by file path
    # that EL8 lacks.
    other=$(printf '%s\n' "$reqs" | grep '\.so' | grep -Ev '^(libc|libm|libdl|libpthread|librt|libgcc_s|ld-linux-x86-64|ld-linux-aarch64)\.so' || true)
    if [ -z "$other" ]; then
        ok "rpm -qp --requires: only glibc and libgcc libraries"
    else
        not_ok "rpm -qp --requires: only glibc and libgcc libraries" "$other"
    fi
fi

# ---------------------------------------------------------------- Slurm version check
# The maintainer scripts that refuse a Slurm of another major.minor, with stand-in Slurm
# commands on PATH: the .deb's preinst, and the RPM's %pre.
SV=$WORK/slurm-version
mkdir -p "$SV/bin"
fake_slurm() { # fake_slurm VERSION|none
    rm -f "$SV/bin/slurmd" "$SV/bin/sinfo" "$SV/bin/srun"
    [ "$1" = none ] && return 0
    printf '#!/bin/sh\necho "slurm %s"\n' "$1" >"$SV/bin/slurmd"
    chmod +x "$SV/bin/slurmd"
}
dpkg-deb -I "$DEB" preinst >"$SV/preinst" && chmod +x "$SV/preinst"
slurm_script_cases() { # slurm_script_cases NAME SCRIPT ARG
    local name=$1 script=$2 arg=$3 path="$SV/bin:/usr/bin:/bin"
    fake_slurm "$SLURM_MAJMIN.9"
    check "$name: Slurm $SLURM_MAJMIN.9 installed: goes on" env PATH="$path" "$script" "$arg"
    fake_slurm 99.11.0
    if out=$(env PATH="$path" "$script" "$arg" 2>&1); then
        not_ok "$name: Slurm 99.11 installed: refuses (it succeeded)" "$out"
    elif grep -q "built for Slurm $SLURM_MAJMIN, but Slurm 99.11 is installed" <<<"$out"; then
        ok "$name: Slurm 99.11 installed: refuses, naming both versions"
    else
        not_ok "$name: Slurm 99.11 installed: refuses, naming both versions" "$out"
    fi
    check "$name: COLLOC_IGNORE_SLURM_VERSION=1 installs anyway" \
        env PATH="$path" COLLOC_IGNORE_SLURM_VERSION=1 "$script" "$arg"
    fake_slurm none
    if out=$(env PATH="$SV/bin:/nonexistent" "$script" "$arg" 2>&1) &&
        grep -q "works only with Slurm $SLURM_MAJMIN" <<<"$out"; then
        ok "$name: no Slurm command answers: a warning, goes on"
    else
        not_ok "$name: no Slurm command answers: a warning, goes on" "$out"
    fi
}
slurm_script_cases "deb preinst install" "$SV/preinst" install

# ---------------------------------------------------------------- .rpm contents
if [ -n "${RPM:-}" ]; then
    rpm_list=$(rpm -qlp "$RPM" 2>/dev/null)
    for f in /usr/bin/colloc /usr/lib64/slurm/libcolloc_spank.so \
        /etc/slurm/plugstack.conf.d/colloc.conf /etc/slurm/colloc.toml /var/lib/colloc \
        /usr/share/man/man1/colloc.1.gz /usr/share/man/man5/colloc.toml.5.gz \
        /usr/share/man/man8/colloc-spank.8.gz /usr/libexec/colloc/colloc-pre-remove \
        /usr/share/doc/colloc/copyright /usr/share/doc/colloc/CHANGELOG.md; do
        if printf '%s\n' "$rpm_list" | grep -qx "$f"; then ok "rpm -qlp: $f"; else not_ok "rpm -qlp: $f" "$rpm_list"; fi
    done
    check "rpm: colloc.toml and plugstack fragment are %config(noreplace)" bash -c \
        "rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$RPM' | grep -qx 'cn /etc/slurm/colloc.toml' &&
         rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$RPM' | grep -qx 'cn /etc/slurm/plugstack.conf.d/colloc.conf'"
    check "rpm: /var/lib/colloc is root 0700" bash -c \
        "rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME} %{FILENAMES}\n]' '$RPM' | grep -qx 'drwx------ root /var/lib/colloc'"
    check "rpm: Requires slurm $SLURM_MAJMIN only" bash -c \
        "rpm -qp --requires '$RPM' | grep -qx 'slurm >= $SLURM_MAJMIN' && rpm -qp --requires '$RPM' | grep -qx 'slurm < $SLURM_NEXT'"
    for f in /usr/share/bash-completion/completions/colloc /usr/share/zsh/site-functions/_colloc \
        /usr/share/fish/vendor_completions.d/colloc.fish /usr/share/doc/colloc/SECURITY.md \
        /usr/share/doc/colloc/design.md /usr/share/doc/colloc/admin.md \
        /usr/share/doc/colloc/multinode.md /usr/share/doc/colloc/slurm-callbacks.md \
        /usr/share/doc/colloc/LICENSE-MIT /usr/share/doc/colloc/LICENSE-APACHE \
        /usr/share/doc/colloc/examples/runs.toml \
        /usr/share/doc/colloc/examples/mps-pack.sbatch /usr/share/doc/colloc/examples/slurm-conf/gres.conf; do
        if printf '%s\n' "$rpm_list" | grep -qx "$f"; then ok "rpm -qlp: $f"; else not_ok "rpm -qlp: $f" "$rpm_list"; fi
    done
    # %pre as rpm runs it: the scriptlet text between "preinstall scriptlet" and the next.
    rpm -qp --scripts "$RPM" 2>/dev/null |
        awk '/^preinstall scriptlet/ { f = 1; next } /^[a-z]+ (scriptlet|program)/ { f = 0 } f' >"$SV/pre"
    (echo '#!/bin/sh'; cat "$SV/pre") >"$SV/pre.sh" && chmod +x "$SV/pre.sh"
    slurm_script_cases "rpm %pre" "$SV/pre.sh" 1
    check "rpm: %post runs colloc-post-install, as the deb's postinst" bash -c \
        "rpm -qp --scripts '$RPM' | sed -n '/^postinstall scriptlet/,/^[a-z]* *un*install/p' | grep -q '/usr/libexec/colloc/colloc-post-install install'"
    for f in /usr/libexec/colloc/colloc-post-install /usr/lib/systemd/system/colloc-check.service \
        /usr/lib/systemd/system/colloc-metrics.service /usr/lib/systemd/system/colloc-metrics.timer; do
        if printf '%s\n' "$rpm_list" | grep -qx "$f"; then ok "rpm -qlp: $f"; else not_ok "rpm -qlp: $f" "$rpm_list"; fi
    done
    check "rpm: Packager and URL from packaging/site.env, no FILL IN in its header or files" bash -c \
        "[ \"\$(rpm -qp --qf '%{PACKAGER}' '$RPM')\" = '$COLLOC_MAINTAINER' ] &&
         [ \"\$(rpm -qp --qf '%{URL}' '$RPM')\" = '$COLLOC_URL' ] &&
         ! rpm -qip --changelog '$RPM' | grep -qiE 'fill[ -]in' && ! grep -rIqiE 'fill[ -]in' '$EX/rpm'"
    check "rpm: installed SECURITY.md names the security contact of packaging/site.env" \
        grep -qxF -- "- Security contact: $COLLOC_SECURITY_CONTACT" "$EX/rpm/usr/share/doc/colloc/SECURITY.md"
    check "rpm: %preun runs colloc-pre-remove on erase" bash -c \
        "rpm -qp --scripts '$RPM' | sed -n '/^preuninstall/,/^[a-z]*install/p' | grep -q colloc-pre-remove"
    check "src.rpm: BuildRequires slurm-devel, cargo, clang-devel" bash -c \
        "rpm -qp --requires '$SRPM' | grep -qx slurm-devel && rpm -qp --requires '$SRPM' | grep -q '^cargo' && rpm -qp --requires '$SRPM' | grep -qx clang-devel"
    # The spec's Rust minimum is the workspace's rust-version (which clippy's
    # incompatible_msrv lint holds the code to).
    MSRV=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$REPO/Cargo.toml")
    check "src.rpm: BuildRequires cargo and rust >= rust-version ($MSRV)" bash -c \
        "rpm -qp --requires '$SRPM' | grep -qx 'cargo >= $MSRV' && rpm -qp --requires '$SRPM' | grep -qx 'rust >= $MSRV'"
fi

# ---------------------------------------------------------------- offline source build
# The source RPM's sources rebuild with no network: %prep as the spec writes it (the
# vendored crates and the .cargo/config.toml that points cargo at them), then cargo
# --offline --frozen with an empty CARGO_HOME (no registry cache) in a network namespace
# of its own (no network at all).
if [ -n "${RPM:-}" ] && [ "${COLLOC_TEST_OFFLINE_BUILD:-1}" = 1 ]; then
    OB=$WORK/offline
    mkdir -p "$OB"/{SOURCES,SPECS,BUILD,cargo-home}
    rpm2cpio "$SRPM" | (cd "$OB/SOURCES" && cpio -idm --quiet 2>/dev/null)
    t0=$(date +%s)
    if rpmbuild -bp --nodeps --define "_topdir $OB" --define "_builddir $OB/BUILD" \
        "$OB/SOURCES/colloc.spec" >"$OB/prep.log" 2>&1; then
        ok "src.rpm: %prep unpacks the sources and the vendored crates"
        src=$(find "$OB/BUILD" -maxdepth 3 -name Cargo.lock -printf '%h\n' | head -n 1)
        if (cd "$src" && CARGO_HOME=$OB/cargo-home CARGO_TARGET_DIR=$OB/target \
            unshare -n cargo build --offline --frozen -q -p colloc -p colloc-spank) >"$OB/build.log" 2>&1 &&
            [ -x "$OB/target/debug/colloc" ] && [ -f "$OB/target/debug/libcolloc_spank.so" ]; then
            ok "src.rpm sources build offline: cargo build --offline --frozen, empty CARGO_HOME, no network ($(elapsed "$t0") s)"
        else
            not_ok "src.rpm sources build offline" "$(tail -n 20 "$OB/build.log")"
        fi
    else
        not_ok "src.rpm: rpmbuild -bp" "$(tail -n 20 "$OB/prep.log")"
    fi
    rm -rf "$OB"
fi

# ---------------------------------------------------------------- the pre-remove logic
# colloc-pre-remove alone, with a stand-in colloc, so its decisions are checked even where
# apply/restore cannot run.
PR=$WORK/pre-remove
mkdir -p "$PR/state/jobs"
printf 'version = 1\nstate_dir = "%s/state"\n' "$PR" >"$PR/colloc.toml"
stub() { # stub EXIT-CODE REMOVE-JOURNALS
    printf '#!/bin/sh\necho "$@" >>"%s/calls"\n[ %s = 1 ] && rm -f "%s"/state/jobs/*.json\nexit %s\n' \
        "$PR" "$2" "$PR" "$1" >"$PR/colloc"
    chmod +x "$PR/colloc"
}
# shellcheck disable=SC2317 # called through check
pre_remove() { COLLOC_BIN=$PR/colloc COLLOC_CONFIG=$PR/colloc.toml "$REPO/packaging/colloc-pre-remove"; }
stub 1 0
check "pre-remove: no journal: removal goes on" pre_remove
check "pre-remove: no journal: colloc not called" test ! -e "$PR/calls"
echo '{}' >"$PR/state/jobs/7.json"
check_fails "pre-remove: journal in state_dir from the config and restore fails: refuses" pre_remove
check "pre-remove: it called colloc --config FILE restore --all" grep -qx -- "--config $PR/colloc.toml restore --all" "$PR/calls"
stub 0 0
check_fails "pre-remove: restore says success but the journal remains: refuses" pre_remove
stub 0 1
check "pre-remove: restore succeeds and removes the journal: removal goes on" pre_remove
echo '{}' >"$PR/state/jobs/8.json"
stub 1 0
check "pre-remove: COLLOC_FORCE_REMOVE=1 skips the check" env COLLOC_FORCE_REMOVE=1 \
    COLLOC_BIN="$PR/colloc" COLLOC_CONFIG="$PR/colloc.toml" "$REPO/packaging/colloc-pre-remove"

# ---------------------------------------------------------------- install
if dpkg -s colloc >/dev/null 2>&1; then
    # Left over from an earlier run: start clean (nothing of ours is on a GPU here).
    COLLOC_FORCE_REMOVE=1 dpkg --purge colloc >/dev/null 2>&1
fi
check "apt-get install ./$(basename "$DEB")" apt-get install -y -q "$DEB"
# shellcheck disable=SC2016 # expanded by the inner bash
check "dpkg -V colloc: installed files intact" bash -c '[ -z "$(dpkg -V colloc)" ]'
check "/usr/bin/colloc runs (--version)" /usr/bin/colloc --version
if command -v systemctl >/dev/null; then
    check "install enabled colloc-check.service (slurmd.service.wants link)" bash -c \
        "[ \"\$(readlink -f /etc/systemd/system/slurmd.service.wants/colloc-check.service)\" = \"\$(readlink -f /usr/lib/systemd/system/colloc-check.service)\" ]"
    check "install did not enable colloc-metrics.timer (the admin does)" \
        test ! -e /etc/systemd/system/timers.target.wants/colloc-metrics.timer
fi
# A boot: /run/colloc is an empty folder again; the unit's command makes the capped tmpfs.
if awk '$2 == "/run/colloc" && $3 == "tmpfs" { f = 1 } END { exit !f }' /proc/self/mounts &&
    [ -z "$(ls -A /run/colloc)" ] && umount /run/colloc; then
    exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/colloc-check.service)
    check "boot: the unit's ExecStart ($exec_start) mounts the capped tmpfs at /run/colloc again" bash -c \
        "$exec_start >/dev/null 2>&1; awk '\$2 == \"/run/colloc\" && \$3 == \"tmpfs\" { f = 1 } END { exit !f }' /proc/self/mounts"
else
    not_ok "boot: install left an empty capped tmpfs at /run/colloc to start from" "$(grep /run/colloc /proc/self/mounts)"
fi
check "colloc check-config accepts the shipped colloc.toml" /usr/bin/colloc check-config /etc/slurm/colloc.toml
perm() { stat -c '%a %U:%G' "$1" 2>&1; }
for e in "755 root:root /usr/bin/colloc" "644 root:root $PLUGIN" \
    "644 root:root /etc/slurm/colloc.toml" "644 root:root /etc/slurm/plugstack.conf.d/colloc.conf" \
    "700 root:root /var/lib/colloc" "755 root:root /run/colloc"; do
    f=${e##* } want=${e% *}
    got=$(perm "$f")
    if [ "$got" = "$want" ]; then ok "installed $f is $want"; else not_ok "installed $f is $want" "got: $got"; fi
done
check "installed plugin exports the SPANK symbols" check_plugin "$PLUGIN"
# The installed completions load in their shells and complete colloc's commands.
check "bash completion: installed, loads, completes subcommands" bash -c \
    '. /usr/share/bash-completion/completions/colloc && complete -p colloc >/dev/null &&
     COMP_WORDS=(colloc st) COMP_CWORD=1 && _colloc colloc st colloc && printf "%s\n" "${COMPREPLY[@]}" | grep -qx status'
check "zsh completion: installed, defines _colloc" grep -q '^#compdef colloc' /usr/share/zsh/vendor-completions/_colloc
check "fish completion: installed, completes check-config" grep -q 'check-config' /usr/share/fish/vendor_completions.d/colloc.fish
check "Slurm's plugstack.conf includes plugstack.conf.d" \
    grep -Eq '^[[:space:]]*include[[:space:]]+/etc/slurm/plugstack.conf.d/\*\.conf' /etc/slurm/plugstack.conf

# The admin's step: uncomment the shipped plugstack line. Does the installed Slurm load
# the installed plugin from it? (A copy in a temporary slurm.conf; /etc stays as shipped.)
SC=$WORK/slurm
mkdir -p "$SC"
sed 's/^#\(optional\|required\) /\1 /' /etc/slurm/plugstack.conf.d/colloc.conf >"$SC/plugstack.conf"
host=$(hostname -s)
cat >"$SC/slurm.conf" <<EOF
ClusterName=pkgtest
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
PlugStackConfig=$SC/plugstack.conf
NodeName=$host NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=p Nodes=ALL Default=YES
EOF
if command -v sbatch >/dev/null; then
    check "enabled plugstack line: sbatch --help lists --colloc from the installed plugin" \
        bash -c "SLURM_CONF='$SC/slurm.conf' sbatch --help 2>&1 | grep -q -- '--colloc=MODE'"
    if ! out=$(SLURM_CONF=$SC/slurm.conf timeout 20 sbatch --colloc=bogus --wrap true 2>&1) &&
        grep -q 'colloc: --colloc: invalid mode' <<<"$out"; then
        ok "enabled plugstack line: sbatch --colloc=bogus fails with the grammar's message"
    else
        not_ok "enabled plugstack line: sbatch --colloc=bogus fails with the grammar's message" "$out"
    fi
fi

# ---------------------------------------------------------------- man pages
for page in "1 colloc" "5 colloc.toml" "8 colloc-spank"; do
    sec=${page%% *} name=${page#* }
    if out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings "$sec" "$name" 2>"$WORK/man.err") &&
        [ ! -s "$WORK/man.err" ] && grep -q '^NAME' <<<"$out" &&
        [ "$(wc -l <<<"$out")" -gt 20 ]; then
        ok "man $sec $name renders without warnings ($(wc -l <<<"$out") lines)"
    else
        not_ok "man $sec $name renders without warnings" "$(cat "$WORK/man.err")"
    fi
done

# ---------------------------------------------------------------- journal, upgrade, removal
# The fake GPU: an A100 40GB in MIG mode, state private to this test.
export COLLOC_FAKE_NVML_STATE=$WORK/fake-nvml.json
export COLLOC_FAKE_NVML_GPUS=A100-40GB
if [ -n "${COLLOC_FAKE_NVML_LIB:-}" ]; then
    FAKE_NVML=$COLLOC_FAKE_NVML_LIB
else
    FAKE_NVML=${CARGO_TARGET_DIR:-$REPO/target}/debug/libfake_nvml.so
    (cd "$REPO" && cargo build -q -p fake-nvml) >"$WORK/fake.log" 2>&1 ||
        not_ok "cargo build -p fake-nvml" "$(tail -n 20 "$WORK/fake.log")"
fi
instances() { jq '[.gpus[0].gis[]] | length' "$COLLOC_FAKE_NVML_STATE" 2>/dev/null || echo "no state"; }
set_nvml() { sed -i "s|^nvml_library = .*|nvml_library = \"$1\"|" /etc/slurm/colloc.toml; }

# The admin's edits: the fake NVML library and a marker line.
MARK="# admin edit $$"
set_nvml "$FAKE_NVML"
# MIG device files from the fake driver's capability tree (beside its state file) into a
# folder of the test's.
sed -i -e "s|^caps_dev_dir = .*|caps_dev_dir = \"$WORK/dev/nvidia-caps\"|" \
    -e "s|^caps_proc_dir = .*|caps_proc_dir = \"$WORK/proc/driver/nvidia/capabilities\"|" \
    -e "s|^mig_minors = .*|mig_minors = \"$WORK/proc/driver/nvidia-caps/mig-minors\"|" \
    -e "s|^proc_devices = .*|proc_devices = \"$WORK/proc/devices\"|" \
    -e "s|^nvidia_modprobe = .*|nvidia_modprobe = \"$WORK/no-nvidia-modprobe\"|" /etc/slurm/colloc.toml
echo "$MARK" >>/etc/slurm/colloc.toml
check "edited colloc.toml is valid" /usr/bin/colloc check-config /etc/slurm/colloc.toml

if out=$(/usr/bin/colloc apply mig:3g --gpu 0 --job 7 2>&1) && [ "$(instances)" = 2 ] &&
    [ -f /var/lib/colloc/jobs/7.json ]; then
    ok "colloc apply mig:3g --gpu 0 --job 7: 2 instances on the fake GPU, journal written"
    applied=1
else
    not_ok "colloc apply mig:3g --gpu 0 --job 7 (instances: $(instances))" "$out"
    applied=0
fi

# An upgrade (same package, revision 2) keeps the journal, the GPU layout and the config.
t0=$(date +%s)
DEB2=$(COLLOC_PREBUILT=1 COLLOC_DEB_REVISION=2 "$REPO/packaging/build-deb.sh" 2>"$WORK/build-deb2.log" | tail -n 1)
if [ -f "$DEB2" ]; then
    check "upgrade to $(basename "$DEB2") installs" apt-get install -y -q "$DEB2"
    check "upgrade kept the admin's colloc.toml" grep -qxF "$MARK" /etc/slurm/colloc.toml
    if [ "$applied" = 1 ]; then
        check "upgrade left the running job's GPU layout and journal alone" \
            bash -c "[ \"\$(jq '[.gpus[0].gis[]] | length' '$COLLOC_FAKE_NVML_STATE')\" = 2 ] && [ -f /var/lib/colloc/jobs/7.json ]"
    fi
else
    not_ok "build-deb.sh with COLLOC_DEB_REVISION=2" "$(tail -n 20 "$WORK/build-deb2.log")"
    DEB2=$DEB
fi
check "apt-get install --reinstall keeps the admin's colloc.toml" bash -c \
    "apt-get install -y -q --reinstall '$DEB2' >/dev/null 2>&1 && grep -qxF '$MARK' /etc/slurm/colloc.toml"
check "dpkg -V: only colloc.toml changed" bash -c \
    "[ \"\$(dpkg -V colloc | awk '{ print \$NF }')\" = /etc/slurm/colloc.toml ]"

# Restore cannot work (NVML missing): removal is refused, nothing changes.
if [ "$applied" = 1 ]; then
    set_nvml /nonexistent/libnvidia-ml.so.1
    check_fails "apt-get remove refuses while the journal exists and restore fails" \
        apt-get remove -y -q colloc
    check "still installed after the refused removal" bash -c \
        "dpkg -s colloc | grep -qx 'Status: install ok installed'"
    check "refused removal left the journal and the 2 instances" bash -c \
        "[ -f /var/lib/colloc/jobs/7.json ] && [ \"\$(jq '[.gpus[0].gis[]] | length' '$COLLOC_FAKE_NVML_STATE')\" = 2 ]"
    set_nvml "$FAKE_NVML"
fi

# Removal with a working restore: restores first, then removes.
if out=$(apt-get remove -y -q colloc 2>&1); then
    ok "apt-get remove colloc"
else
    not_ok "apt-get remove colloc" "$out"
fi
if [ "$applied" = 1 ]; then
    check "removal restored first: its output says so" grep -q "restoring the GPUs" <<<"$out"
    check "removal left no instance on the fake GPU" bash -c "[ \"\$(jq '[.gpus[0].gis[]] | length' '$COLLOC_FAKE_NVML_STATE')\" = 0 ]"
    check "removal left no journal" bash -c "[ -z \"\$(ls -A /var/lib/colloc/jobs 2>/dev/null)\" ]"
fi
check "removed: plugin and binary gone" bash -c "[ ! -e '$PLUGIN' ] && [ ! -e /usr/bin/colloc ]"
check "removed: colloc-check.service disabled (no slurmd.service.wants link)" \
    test ! -e /etc/systemd/system/slurmd.service.wants/colloc-check.service
check "removed (not purged): the admin's colloc.toml stays" grep -qxF "$MARK" /etc/slurm/colloc.toml
check "dpkg --purge colloc" dpkg --purge colloc
check "purged: /etc/slurm/colloc.toml and /var/lib/colloc gone" bash -c \
    "[ ! -e /etc/slurm/colloc.toml ] && [ ! -e /var/lib/colloc ] && [ ! -e /etc/slurm/plugstack.conf.d/colloc.conf ]"
if [ "$run_was_mounted" = 0 ]; then
    check "purged: the tmpfs the install mounted at /run/colloc is unmounted and gone" bash -c \
        "! awk '\$2 == \"/run/colloc\"' /proc/self/mounts | grep -q . && [ ! -e /run/colloc ]"
fi

# ---------------------------------------------------------------- leave it installed
if [ "${COLLOC_TEST_KEEP_INSTALLED:-1}" = 1 ]; then
    check "reinstall the package (pristine config) for the Slurm tests" apt-get install -y -q "$DEB"
    echo "installed: COLLOC_SPANK_PLUGIN=$PLUGIN COLLOC_BIN=/usr/bin/colloc"
fi
finish
