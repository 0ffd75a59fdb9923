# Shared by build-deb.sh, build-rpm.sh and test-packages.sh (sourced, not run).
# Sets: REPO, PKG_VERSION, SLURM_VERSION_NUMBER, SLURM_MAJMIN, SLURM_NEXT, OUT_DIR,
# and the functions below.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT_DIR=${COLLOC_PKG_OUT:-$REPO/target/packages}
SLURM_VERSION_H=${SLURM_VERSION_H:-/usr/include/slurm/slurm_version.h}

die() {
    echo "packaging: error: $*" >&2
    exit 1
}

# The workspace version, from [workspace.package] in the root Cargo.toml.
PKG_VERSION=$(awk '
    /^\[workspace\.package\]/ { f = 1; next }
    /^\[/ { f = 0 }
    f && $1 == "version" { gsub(/"/, "", $3); print $3; exit }
' "$REPO/Cargo.toml")
[ -n "$PKG_VERSION" ] || die "no version in [workspace.package] of $REPO/Cargo.toml"

# The Slurm the plugin is built against: SLURM_VERSION_NUMBER from the installed header,
# the same number bindgen reads for plugin_version. Slurm loads a plugin only when its
# major.minor equals its own, so the packages depend on exactly that major.minor.
slurm_version() {
    [ -r "$SLURM_VERSION_H" ] ||
        die "$SLURM_VERSION_H missing: install libslurm-dev (Debian) or slurm-devel (RPM)"
    SLURM_VERSION_NUMBER=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$SLURM_VERSION_H")
    case $SLURM_VERSION_NUMBER in
        0x[0-9a-fA-F]*) ;;
        *) die "no SLURM_VERSION_NUMBER in $SLURM_VERSION_H" ;;
    esac
    local major=$((SLURM_VERSION_NUMBER >> 16)) minor=$(((SLURM_VERSION_NUMBER >> 8) & 0xff))
    SLURM_MAJMIN=$(printf '%d.%02d' "$major" "$minor")
    SLURM_NEXT=$(printf '%d.%02d' "$major" $((minor + 1)))
}

# Release binaries, built for the clusters that exist: glibc 2.28 (RHEL/Rocky/Alma 8; 9
# has 2.34, Debian 12 2.36), with cargo-zigbuild and zig (scripts/install-zig.sh), into
# target/x86_64-unknown-linux-gnu/release/{colloc,libcolloc_spank.so}. The Slurm headers
# are still the installed ones (spank/build.rs). COLLOC_PREBUILT=1 skips cargo and uses
# what is there (CI builds once for both packages).
GLIBC_TARGET=${COLLOC_GLIBC_TARGET:-x86_64-unknown-linux-gnu.2.28}
GLIBC_MAX=${GLIBC_TARGET##*-gnu.}
RUST_TARGET=${GLIBC_TARGET%".$GLIBC_MAX"}
RELEASE_DIR=${CARGO_TARGET_DIR:-$REPO/target}/$RUST_TARGET/release
build_release() {
    if [ "${COLLOC_PREBUILT:-0}" != 1 ]; then
        command -v cargo-zigbuild >/dev/null && command -v python3 >/dev/null &&
            python3 -m ziglang version >/dev/null 2>&1 ||
            die "cargo-zigbuild or zig missing: run scripts/install-zig.sh"
        (cd "$REPO" && cargo zigbuild --release --locked -p colloc -p colloc-spank \
            --target "$GLIBC_TARGET") || die "cargo zigbuild --release failed"
    fi
    [ -x "$RELEASE_DIR/colloc" ] || die "$RELEASE_DIR/colloc missing"
    [ -f "$RELEASE_DIR/libcolloc_spank.so" ] || die "$RELEASE_DIR/libcolloc_spank.so missing"
    check_plugin "$RELEASE_DIR/libcolloc_spank.so"
    check_glibc "$RELEASE_DIR/colloc" "$RELEASE_DIR/libcolloc_spank.so"
}

# The newest GLIBC_x.y symbol version an ELF file needs (objdump -T), e.g. 2.28.
glibc_needed() {
    objdump -T "$1" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' |
        sort -uV | tail -n 1
}

# Every file given needs at most GLIBC_$GLIBC_MAX.
check_glibc() {
    local f need
    for f in "$@"; do
        need=$(glibc_needed "$f")
        [ -n "$need" ] || die "$f: no GLIBC symbol versions found (objdump -T)"
        [ "$(printf '%s\n%s\n' "$need" "$GLIBC_MAX" | sort -V | tail -n 1)" = "$GLIBC_MAX" ] ||
            die "$f needs GLIBC_$need, more than the $GLIBC_MAX it is built for"
    done
}

# A SPANK plugin that slurmd will load exports these (see slurm-test-cluster.md).
check_plugin() {
    local so=$1 sym missing=""
    local syms
    syms=$(nm -D --defined-only "$so" 2>/dev/null | awk '{ print $NF }') ||
        die "cannot read the dynamic symbols of $so"
    for sym in plugin_name plugin_type plugin_version slurm_spank_init \
        slurm_spank_job_prolog slurm_spank_job_epilog; do
        printf '%s\n' "$syms" | grep -qx "$sym" || missing="$missing $sym"
    done
    [ -z "$missing" ] || die "$so does not export:$missing (not a complete SPANK plugin)"
}

# Package sources that another part of the tree may own: prefer slurm-conf/, fall back to
# packaging/etc/.
conf_source() {
    local name=$1 fallback=$2
    if [ -f "$REPO/slurm-conf/$name" ]; then
        echo "$REPO/slurm-conf/$name"
    else
        echo "$REPO/packaging/etc/$fallback"
    fi
}

# A fixed timestamp for reproducible archives: the last commit's time.
source_date_epoch() {
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || date +%s)}
    export SOURCE_DATE_EPOCH
}

MAN_PAGES="colloc.1 colloc.toml.5 colloc-spank.8"

# Who builds and answers for these packages, where the project lives, where security
# reports go: packaging/site.env, the one place a site fills (environment variables win).
# shellcheck source=../site.env
. "$REPO/packaging/site.env"

# The vendored crates of the workspace (`cargo vendor`, from Cargo.lock) as a tarball
# whose top folder is vendor/, for builds without network (the RPM spec's Source1).
make_vendor_tarball() { # make_vendor_tarball OUT.tar.xz
    local tmp
    tmp=$(mktemp -d) || return 1
    (cd "$REPO" && { cargo vendor --locked --offline "$tmp/vendor" >/dev/null 2>"$tmp/log" ||
        cargo vendor --locked "$tmp/vendor" >/dev/null 2>"$tmp/log"; }) ||
        { cat "$tmp/log" >&2; rm -rf "$tmp"; return 1; }
    tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner \
        --mtime="@${SOURCE_DATE_EPOCH:-0}" -cJf "$1" vendor
    rm -rf "$tmp"
}

# The installed SECURITY.md: its "Security contact" line names COLLOC_SECURITY_CONTACT.
install_security_md() { # install_security_md DEST
    sed "s|^- Security contact:.*|- Security contact: $COLLOC_SECURITY_CONTACT|" \
        "$REPO/SECURITY.md" >"$1"
    chmod 0644 "$1"
}

# The lowest libc6 the binaries given run with: the newest GLIBC_x.y symbol version they
# reference (objdump -T). dpkg-shlibdeps alone says more (2.34 on Debian 12: its libc6
# symbols file dates sysconf@GLIBC_2.2.5 at 2.34, since glibc 2.34 added the
# _SC_SIGSTKSZ and _SC_MINSIGSTKSZ queries, which nothing in colloc asks for; Rust's std
# sizes its signal stack with getauxval), though the binaries run on 2.28.
libc6_needed() {
    local f need=0
    for f in "$@"; do
        need=$(printf '%s\n%s\n' "$need" "$(glibc_needed "$f")" | sort -V | tail -n 1)
    done
    echo "$need"
}

# The documents both packages install in /usr/share/doc/colloc/.
DOC_FILES="README.md SECURITY.md LICENSE-MIT LICENSE-APACHE $(cd "$REPO" && ls docs/*.md 2>/dev/null | tr '\n' ' ')"

# The examples both packages ship, into DIR: the user's job scripts and run manifest
# (slurm-conf/examples/) in DIR, the admin's configuration files (slurm-conf/) in
# DIR/slurm-conf.
install_examples() {
    local dir=$1
    install -d -m 0755 "$dir" "$dir/slurm-conf"
    find "$REPO/slurm-conf/examples" -maxdepth 1 -type f -exec install -m 0644 -t "$dir" {} +
    find "$REPO/slurm-conf" -maxdepth 1 -type f -exec install -m 0644 -t "$dir/slurm-conf" {} +
}
