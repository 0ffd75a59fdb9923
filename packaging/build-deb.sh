#!/bin/bash
# Build the colloc Debian package from a staged tree with plain dpkg-deb.
# Why not cargo-deb or debhelper: packaging/README.md.
#
#   packaging/build-deb.sh            cargo build --release, then stage and pack
#   COLLOC_PREBUILT=1 packaging/...   use target/release as it is
#
# Output: target/packages/colloc_<version>-<rev>_<arch>.deb (path printed last).
set -euo pipefail
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

REVISION=${COLLOC_DEB_REVISION:-1}
DEB_VERSION=$PKG_VERSION-$REVISION
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
PLUGINDIR=/usr/lib/$MULTIARCH/slurm-wlm

slurm_version
build_release
source_date_epoch
command -v dpkg-shlibdeps >/dev/null || die "dpkg-shlibdeps missing: apt-get install dpkg-dev"

STAGE=$OUT_DIR/deb-stage
ROOT=$STAGE/root
rm -rf "$STAGE"
mkdir -p "$ROOT/DEBIAN"
umask 022

# Files.
install -D -m 0755 "$RELEASE_DIR/colloc" "$ROOT/usr/bin/colloc"
install -D -m 0644 "$RELEASE_DIR/libcolloc_spank.so" "$ROOT$PLUGINDIR/libcolloc_spank.so"
# Policy 10.1: stripped, as dh_strip does it; the plugin keeps its dynamic symbols.
strip --remove-section=.comment --remove-section=.note "$ROOT/usr/bin/colloc"
strip --remove-section=.comment --remove-section=.note --strip-unneeded \
    "$ROOT$PLUGINDIR/libcolloc_spank.so"
check_plugin "$ROOT$PLUGINDIR/libcolloc_spank.so"
install -D -m 0755 "$REPO/packaging/colloc-pre-remove" "$ROOT/usr/libexec/colloc/colloc-pre-remove"

install -d -m 0755 "$ROOT/etc/slurm/plugstack.conf.d"
sed "s|@PLUGINDIR@|$PLUGINDIR|g" "$REPO/packaging/etc/plugstack-colloc.conf" \
    >"$ROOT/etc/slurm/plugstack.conf.d/colloc.conf"
chmod 0644 "$ROOT/etc/slurm/plugstack.conf.d/colloc.conf"
install -m 0644 "$(conf_source colloc.toml colloc.toml)" "$ROOT/etc/slurm/colloc.toml"
# The shipped config must be one colloc accepts.
"$RELEASE_DIR/colloc" check-config "$ROOT/etc/slurm/colloc.toml" >/dev/null ||
    die "the colloc.toml to ship fails colloc check-config"
install -D -m 0644 "$REPO/packaging/colloc.tmpfiles" "$ROOT/usr/lib/tmpfiles.d/colloc.conf"
install -D -m 0644 "$REPO/packaging/debian/lintian-overrides" "$ROOT/usr/share/lintian/overrides/colloc"
install -d -m 0700 "$ROOT/var/lib/colloc"

for page in $MAN_PAGES; do
    section=${page##*.}
    install -D -m 0644 "$REPO/packaging/man/$page" "$ROOT/usr/share/man/man$section/$page"
    gzip -9n "$ROOT/usr/share/man/man$section/$page"
done

DOC=$ROOT/usr/share/doc/colloc
install -d -m 0755 "$DOC"
install -m 0644 "$REPO/packaging/debian/copyright" "$DOC/copyright"
[ -f "$REPO/README.md" ] && install -m 0644 "$REPO/README.md" "$DOC/README.md"
gzip -9nc "$REPO/CHANGELOG.md" >"$DOC/changelog.gz"
{
    printf 'colloc (%s) unstable; urgency=medium\n\n' "$DEB_VERSION"
    printf '  * Binary package built by packaging/build-deb.sh from the colloc\n'
    printf '    source; upstream changes are in changelog.gz.\n\n'
    printf ' -- colloc maintainers <colloc@example.invalid>  %s\n' \
        "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$DOC/changelog.Debian.gz"
# Configuration examples (gres.conf, slurm.conf lines, sbatch scripts) where present.
if [ -d "$REPO/slurm-conf" ] && [ -n "$(ls -A "$REPO/slurm-conf")" ]; then
    install -d -m 0755 "$DOC/examples"
    find "$REPO/slurm-conf" -maxdepth 1 -type f -exec install -m 0644 -t "$DOC/examples" {} +
fi

# Library dependencies, as dh_shlibdeps computes them (it wants a debian/control).
SHL=$STAGE/shlibdeps
mkdir -p "$SHL/debian"
printf 'Source: colloc\n\nPackage: colloc\nArchitecture: any\n' >"$SHL/debian/control"
SHLIBS=$(cd "$SHL" && dpkg-shlibdeps -O -e"$ROOT/usr/bin/colloc" \
    -e"$ROOT$PLUGINDIR/libcolloc_spank.so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$SHLIBS" ] || die "dpkg-shlibdeps found no library dependencies"

# Control area.
for s in postinst prerm postrm; do
    install -m 0755 "$REPO/packaging/debian/$s" "$ROOT/DEBIAN/$s"
done
printf '/etc/slurm/colloc.toml\n/etc/slurm/plugstack.conf.d/colloc.conf\n' >"$ROOT/DEBIAN/conffiles"
chmod 0644 "$ROOT/DEBIAN/conffiles"
SIZE=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
sed -e "s|@VERSION@|$DEB_VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@INSTALLED_SIZE@|$SIZE|" \
    -e "s|@SHLIBS_DEPENDS@|$SHLIBS|" -e "s|@SLURM_MAJMIN@|$SLURM_MAJMIN|g" \
    -e "s|@SLURM_NEXT@|$SLURM_NEXT|g" "$REPO/packaging/debian/control.in" >"$ROOT/DEBIAN/control"
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
    xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/md5sums"

find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
DEB=$OUT_DIR/colloc_${DEB_VERSION}_$ARCH.deb
rm -f "$DEB"
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "built $DEB (Slurm $SLURM_MAJMIN, plugin in $PLUGINDIR)" >&2
echo "$DEB"
