#!/usr/bin/env bash
# nginx's own test suite (nginx-tests, https://github.com/nginx/nginx-tests; not a Debian
# package, so not in CI) against Debian's nginx twice: as it is, and with grl loaded and a
# catch-all bucket (grl on, grl_caller $remote_addr) in every test's http{}. Prints the test
# files that fail only with grl: grl must change nothing another module or the log sees
# (issue 11 section 5; docs/design.md, "Phase order").
# Usage: bash bench/nginx_tests.sh NGINX_TESTS_DIR [TEST.t ...]   (default: every test file)
#   env: GRL_BUILD_DIR (default build), NGINX (default /usr/sbin/nginx), JOBS (default nproc)
set -euo pipefail
tests_dir=$(cd "${1:?usage: bash bench/nginx_tests.sh NGINX_TESTS_DIR [TEST.t ...]}" && pwd)
shift
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${GRL_BUILD_DIR:-$root/build}" && pwd)
module="$build/ngx_module/ngx_http_grl_module.so"
nginx=${NGINX:-/usr/sbin/nginx}
jobs=${JOBS:-$(nproc)}
[ -f "$module" ] || { echo "nginx_tests: $module not built" >&2; exit 2; }
out=$(mktemp -d /tmp/grl-nginx-tests.XXXXXX)
# Test::Nginx loads every module `nginx -V` lists as dynamic from nginx's modules path. Where
# Debian's libnginx-mod-* packages are not installed, a wrapper hides them from -V, and the
# tests that need them (stream, mail, perl, geoip, image_filter, xslt) skip.
mods=$("$nginx" -V 2>&1 | tr ' ' '\n' | sed -n 's/^--modules-path=//p')
if compgen -G "${mods:-/nonexistent}/*.so" >/dev/null; then
    export TEST_NGINX_MODULES=$mods
else
    # shellcheck disable=SC2016  # the wrapper's own $1 and $@
    printf '#!/bin/sh\nif [ "$1" = -V ]; then %s -V 2>&1 | sed "s/ --with-[a-z_]*=dynamic//g" >&2; exit 0; fi\nexec %s "$@"\n' \
        "$nginx" "$nginx" >"$out/nginx"
    chmod +x "$out/nginx"
    nginx=$out/nginx
fi
cd "$tests_dir"
if [ $# -eq 0 ]; then set -- *.t; fi

run() {  # run NAME: prove's output in $out/NAME.log, failing files in $out/NAME.failed
    local name=$1
    echo "nginx_tests: $name: $(($# - 1)) test files, $jobs at a time" >&2
    TEST_NGINX_BINARY=$nginx prove -j"$jobs" "${@:2}" >"$out/$name.log" 2>&1 || true
    # One line per failing file from prove's summary: the file and its failed subtests (or
    # "exit N" when it stopped early, e.g. a directive this nginx lacks).
    sed -n '/^Test Summary Report/,$p' "$out/$name.log" | awk '
        /^[A-Za-z0-9_.-]+\.t / { if (f) print f, what; f = $1; what = ""; next }
        /^  Failed tests?:/ { sub(/^  Failed tests?: +/, ""); what = what " failed " $0 }
        /^  Non-zero exit status:/ { what = what " exit " $NF }
        END { if (f) print f, what }' | sort -u >"$out/$name.failed"
    tail -n 3 "$out/$name.log" >&2
}

# As root, nginx's workers would run as nobody and read nothing in the tests' 0700 directories.
globals=""
if [ "$(id -u)" = 0 ]; then globals="user root;"; fi
TEST_NGINX_GLOBALS="$globals" run plain "$@"
# shellcheck disable=SC2016  # $remote_addr is nginx's
TEST_NGINX_GLOBALS="$globals load_module $module;" \
TEST_NGINX_GLOBALS_HTTP='grl_zone grl:1m; grl_bucket all procedure_prefix=/ rate=1000000r/s; grl_caller $remote_addr; grl on;' \
    run grl "$@"
# A file failing only with grl, or failing other subtests with grl than without.
only=$(comm -13 "$out/plain.failed" "$out/grl.failed")
echo "nginx_tests: failing without grl: $(wc -l <"$out/plain.failed"); with grl: $(wc -l <"$out/grl.failed"); logs in $out"
if [ -n "$only" ]; then
    echo "nginx_tests: FAIL only with grl:"
    echo "$only"
    exit 1
fi
echo "nginx_tests: nothing fails only with grl"
