#!/bin/bash
# Build the colloc RPMs on this Debian machine with Debian's rpmbuild, from the spec a
# Rocky/RHEL build uses (packaging/rpm/colloc.spec):
#   1. the source tarball colloc-<version>.tar.gz (the tree's tracked and untracked,
#      not ignored files), the vendored crates colloc-<version>-vendor.tar.xz (`cargo
#      vendor`: the source RPM rebuilds without network) and the source RPM, as a Rocky
#      build would take them;
#   2. the binary RPM with "--with prebuilt": the spec's %build is skipped and the release
#      binaries from cargo (built against this machine's Slurm headers) are packaged.
#      Debian has no slurm-devel or Rust RPM tool chain, so the compile step is the only
#      part CI cannot run the Rocky way.
#
#   packaging/build-rpm.sh            cargo build --release, then rpmbuild
#   COLLOC_PREBUILT=1 packaging/...   use target/release as it is
#
# Output under target/packages/: colloc-<version>-1.x86_64.rpm and the .src.rpm (paths
# printed last, binary first).
set -euo pipefail
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

command -v rpmbuild >/dev/null || die "rpmbuild missing: apt-get install rpm"
SPEC=$REPO/packaging/rpm/colloc.spec
spec_version=$(awk '$1 == "Version:" { print $2; exit }' "$SPEC")
[ "$spec_version" = "$PKG_VERSION" ] ||
    die "$SPEC says Version: $spec_version but Cargo.toml says $PKG_VERSION: update the spec (and its %changelog)"

slurm_version
build_release
source_date_epoch

TOP=$OUT_DIR/rpmbuild
rm -rf "$TOP"
mkdir -p "$TOP"/{SOURCES,SPECS,BUILD,BUILDROOT,RPMS,SRPMS}

# The source tarball: what git tracks plus new files it does not ignore.
(cd "$REPO" && git ls-files -z -co --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - --sort=name --owner=0 --group=0 --numeric-owner \
        --mtime="@$SOURCE_DATE_EPOCH" --transform "s,^,colloc-$PKG_VERSION/," \
        -czf "$TOP/SOURCES/colloc-$PKG_VERSION.tar.gz")
cp "$SPEC" "$TOP/SPECS/"
# Every crate, for a build without network (the spec's Source1): `cargo vendor` from the
# lock file, offline where the crates are cached already.
VENDOR_TAR=$TOP/SOURCES/colloc-$PKG_VERSION-vendor.tar.xz
make_vendor_tarball "$VENDOR_TAR" || die "cargo vendor failed"

common=(--define "_topdir $TOP" --define "_build_id_links none" --define "colloc_url $COLLOC_URL"
    --define "colloc_packager $COLLOC_MAINTAINER"
    --define "slurm_version_number $SLURM_VERSION_NUMBER")
# Debian's rpm runs brp-compress (man page gzip) with /bin/sh, but the script uses bash's
# "read -d": run it with bash, as on RHEL where /bin/sh is bash.
if head -n 1 /usr/lib/rpm/brp-compress 2>/dev/null | grep -qx '#!/bin/sh' &&
    grep -q 'read -r -d' /usr/lib/rpm/brp-compress; then
    common+=(--define "__brp_compress bash %{_rpmconfigdir}/brp-compress %{?_prefix}")
fi
# Source RPM: the spec parsed the Rocky way (no prebuilt), BuildRequires recorded.
rpmbuild -bs --nodeps "${common[@]}" "$TOP/SPECS/colloc.spec" >"$TOP/srpm.log" 2>&1 ||
    { cat "$TOP/srpm.log" >&2; die "rpmbuild -bs failed"; }
# Binary RPM from the prebuilt release binaries.
rpmbuild -bb --with prebuilt --target "$(uname -m)" "${common[@]}" \
    --define "prebuilt_dir $RELEASE_DIR" "$TOP/SPECS/colloc.spec" >"$TOP/rpm.log" 2>&1 ||
    { cat "$TOP/rpm.log" >&2; die "rpmbuild -bb failed (log above)"; }

RPM=$(find "$TOP/RPMS" -name "colloc-$PKG_VERSION-*.rpm" | head -n 1)
SRPM=$(find "$TOP/SRPMS" -name "colloc-$PKG_VERSION-*.src.rpm" | head -n 1)
if [ -z "$RPM" ] || [ -z "$SRPM" ]; then die "rpmbuild made no package (logs in $TOP)"; fi
cp "$RPM" "$SRPM" "$VENDOR_TAR" "$OUT_DIR/"
echo "built $OUT_DIR/$(basename "$RPM") and $(basename "$SRPM") (Slurm $SLURM_MAJMIN)" >&2
echo "$OUT_DIR/$(basename "$RPM")"
echo "$OUT_DIR/$(basename "$SRPM")"
