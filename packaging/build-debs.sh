#!/usr/bin/env bash
# Builds the Debian packages from a build directory (docs/operations.md, "Debian packages"):
#   libnginx-mod-http-grl  the module, the way Debian ships nginx modules: the .so in
#                          /usr/lib/nginx/modules/, mod-http-grl.conf in
#                          /usr/share/nginx/modules-available/ (enabled as
#                          /etc/nginx/modules-enabled/50-mod-http-grl.conf by postinst, as
#                          dh_nginx does), depending on the nginx ABI it was built against
#                          (nginx-dev's debian/libnginx-mod.abisubstvars, e.g. nginx-abi-1.22.1-7)
#   grl-daemons            grl-collector, grl-controller, grlctl, grl-rlc, their systemd units
#                          (conf/systemd/), /etc/grl/ (env files, limits.yaml, rlc.yaml), user grl
# Usage: bash packaging/build-debs.sh BUILD_DIR OUT_DIR    (prints the .deb paths)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: build-debs.sh BUILD_DIR OUT_DIR}" && pwd)
mkdir -p "${2:?usage: build-debs.sh BUILD_DIR OUT_DIR}"
out=$(cd "$2" && pwd)
cache="$build/CMakeCache.txt"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$cache")
nginx_src=$(sed -n 's/^NGINX_SRC_DIR:PATH=//p' "$cache")
[ -n "$version" ] || { echo "build-debs: no CMAKE_PROJECT_VERSION in $cache" >&2; exit 1; }
abi_file="${nginx_src:-/usr/share/nginx/src}/debian/libnginx-mod.abisubstvars"
abi=$(sed -n 's/^nginx:abi=//p' "$abi_file" 2>/dev/null || true)
[ -n "$abi" ] || { echo "build-debs: no nginx:abi= in $abi_file (nginx-dev): cannot say which nginx the module fits" >&2; exit 1; }
debver=${GRL_DEB_VERSION:-$version-1}  # another version: t/deploy/test-debs.sh's previous build
maint=${GRL_DEB_MAINTAINER:-grl maintainers <grl@example.org>}
arch=$(dpkg --print-architecture)
for f in ngx_module/ngx_http_grl_module.so collector/grl-collector controller/grl-controller \
         controller/grlctl rlc/grl-rlc; do
  [ -x "$build/$f" ] || [ -f "$build/$f" ] || { echo "build-debs: $build/$f missing; build it first" >&2; exit 1; }
done
work=$(mktemp -d /tmp/grl-debs-XXXXXX)
trap 'rm -rf "$work"' EXIT

# Shared-library dependencies as Debian computes them (dpkg-shlibdeps wants a debian/control).
shlibs() {
  mkdir -p "$work/shl/debian"
  printf 'Source: grl\n\nPackage: grl\nArchitecture: any\n' >"$work/shl/debian/control"
  (cd "$work/shl" && dpkg-shlibdeps -O "$@" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

docs() {  # $1 package dir, $2 package name
  local d="$1/usr/share/doc/$2"
  mkdir -p "$d"
  printf '%s (%s) unstable; urgency=medium\n\n  * Built from the grl repository (%s).\n\n -- %s  %s\n' \
    "$2" "$debver" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$maint" \
    "$(date -R -d @"${SOURCE_DATE_EPOCH:-$(date +%s)}")" | gzip -9n >"$d/changelog.Debian.gz"
  printf 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: grl\n\nFiles: *\nCopyright: the grl authors\nLicense: other\n The terms of the grl repository this package was built from.\n' >"$d/copyright"
}

control() {  # $1 dir, $2 package, $3 depends, $4 description, extra fields on stdin
  local size
  size=$(du -sk --exclude=DEBIAN "$1" | cut -f1)
  {
    printf 'Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: %s\n' "$2" "$debver" "$arch" "$maint"
    printf 'Installed-Size: %s\nDepends: %s\n' "$size" "$3"
    cat
    printf 'Section: httpd\nPriority: optional\nDescription: %s\n' "$4"
  } >"$1/DEBIAN/control"
}

# --- libnginx-mod-http-grl
m="$work/libnginx-mod-http-grl"
mkdir -p "$m/DEBIAN" "$m/usr/lib/nginx/modules" "$m/usr/share/nginx/modules-available"
install -m 0644 "$build/ngx_module/ngx_http_grl_module.so" "$m/usr/lib/nginx/modules/"
strip --strip-unneeded --remove-section=.comment "$m/usr/lib/nginx/modules/ngx_http_grl_module.so"
echo "load_module modules/ngx_http_grl_module.so;" >"$m/usr/share/nginx/modules-available/mod-http-grl.conf"
docs "$m" libnginx-mod-http-grl
mkdir -p "$m/usr/share/doc/libnginx-mod-http-grl/examples"
install -m 0644 "$root/conf/fleet/grl-buckets.conf" "$root/conf/fleet/grl-locations.conf" \
  "$m/usr/share/doc/libnginx-mod-http-grl/examples/"
install -m 0644 "$root/docs/directives.md" "$m/usr/share/doc/libnginx-mod-http-grl/"
# The Lua API (docs/directives.md, "OpenResty and Lua"), where Debian's lua-resty-core lives.
install -D -m 0644 "$root/lua/resty/grl.lua" "$m/usr/share/lua/5.1/resty/grl.lua"
names="mod-http-grl.conf:50-mod-http-grl.conf"
# Maintainer scripts: dh_nginx's (nginx-dev, /usr/share/debhelper/autoscripts/*-nginx)
# Upgraded under a running nginx: a reload (Debian's nginx-reload trigger, or nginx -s reload)
# keeps serving, but dlopen() of the same path returns the module the master loaded at start,
# still mapped though dpkg replaced its file: the new module runs only after a restart (or a
# binary upgrade), whether or not its zone layout (core/plane/include/grl/plane/shm_layout.h) changed.
upgrade_note='if [ "$1" = configure ] && [ -n "$2" ] &&
   grep -qs "ngx_http_grl_module.so (deleted)" /proc/[0-9]*/maps; then
	echo "libnginx-mod-http-grl: upgraded from $2 under a running nginx, which keeps the module it loaded at start: a reload does not load this one. Restart nginx (systemctl restart nginx) to run it." >&2
fi'
sed "s/#NAMES#/$names/" /usr/share/debhelper/autoscripts/postinst-nginx |
  { echo '#!/bin/sh'; echo 'set -e'; cat; echo "$upgrade_note"; } >"$m/DEBIAN/postinst"
sed "s/#NAMES#/$names/" /usr/share/debhelper/autoscripts/prerm-nginx | { echo '#!/bin/sh'; echo 'set -e'; cat; } >"$m/DEBIAN/prerm"
sed "s/#NAMES#/$names/" /usr/share/debhelper/autoscripts/postrm-nginx | { echo '#!/bin/sh'; echo 'set -e'; cat; } >"$m/DEBIAN/postrm"
chmod 0755 "$m/DEBIAN/postinst" "$m/DEBIAN/prerm" "$m/DEBIAN/postrm"
dep=$(shlibs "$m/usr/lib/nginx/modules/ngx_http_grl_module.so")
printf 'Recommends: nginx\nSuggests: libnginx-mod-http-lua\nHomepage: https://github.com/\n' | sed '/Homepage/d' |
  control "$m" libnginx-mod-http-grl "$abi, $dep" \
  "grl global rate limiter module for nginx
 Counts requests per configured bucket in a shared-memory zone and drops the
 share of them that the grl control plane (package grl-daemons) computes
 from fleet-wide load.
 Built against nginx's ABI $abi."
dpkg-deb --root-owner-group -Zxz --build "$m" "$out/libnginx-mod-http-grl_${debver}_$arch.deb" >/dev/null

# --- grl-daemons
d="$work/grl-daemons"
mkdir -p "$d/DEBIAN" "$d/usr/bin" "$d/lib/systemd/system" "$d/etc/grl"
for b in collector/grl-collector controller/grl-controller controller/grlctl rlc/grl-rlc; do
  install -m 0755 "$build/$b" "$d/usr/bin/"
  strip --strip-unneeded --remove-section=.comment "$d/usr/bin/$(basename "$b")"
done
install -m 0644 "$root"/conf/systemd/*.service "$d/lib/systemd/system/"
install -m 0644 "$root"/packaging/etc/*.env "$d/etc/grl/"
install -m 0644 "$root/conf/fleet/limits.yaml" "$d/etc/grl/limits.yaml"
install -m 0644 "$root/conf/rlc/rlc.yaml" "$root/conf/rlc/quotas.yaml" "$d/etc/grl/"
(cd "$d" && find etc -type f | sort | sed 's|^|/|') >"$d/DEBIAN/conffiles"
docs "$d" grl-daemons
install -m 0644 "$root"/docs/control-plane.md "$root"/docs/rlc.md "$root"/docs/rlc-history.md \
  "$root"/docs/operations.md "$d/usr/share/doc/grl-daemons/"
install -m 0755 "$root/packaging/grl-daemons.postinst" "$d/DEBIAN/postinst"
install -m 0755 "$root/packaging/grl-daemons.postrm" "$d/DEBIAN/postrm"
dep=$(shlibs "$d"/usr/bin/*)
control "$d" grl-daemons "adduser, $dep" \
  "grl global rate limiter control plane: collectors, controllers, configurator
 grl-collector (one per zone), grl-controller (one or two per region), grlctl
 and grl-rlc, the rate limit configurator, with systemd units." </dev/null
dpkg-deb --root-owner-group -Zxz --build "$d" "$out/grl-daemons_${debver}_$arch.deb" >/dev/null
ls "$out"/libnginx-mod-http-grl_"${debver}"_"$arch".deb "$out"/grl-daemons_"${debver}"_"$arch".deb
