#!/usr/bin/env bash
# The Debian packages (packaging/build-debs.sh): built from the build directory, checked by
# lintian (errors fail), installed on this machine with dpkg -i over the previous build (a lower
# version) under a running nginx: the module's package says a restart is needed, a reload keeps
# every answer (and the old module: dlopen of the same path), a restart runs the new one. Then
# the module is enabled the way Debian enables its own (modules-enabled/50-mod-http-grl.conf),
# Debian's nginx passes
# `nginx -t` with the shipped snippets (the modules-enabled include + the fleet's buckets and
# locations from the package's examples), the installed units verify, the installed daemons run;
# then both are purged and the same `nginx -t` must fail on the unknown grl_zone directive
# (the machine is as before: no module, no link, no /etc/grl). Needs root (exit 77: skipped).
# Refuses to touch a machine on which the packages are already installed.
# Usage: bash t/deploy/test-debs.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: test-debs.sh BUILD_DIR}" && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "test-debs: SKIPPED: installs packages, needs root"
  exit 77
fi
pkgs=(libnginx-mod-http-grl grl-daemons)
for p in "${pkgs[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "installed"; then
    echo "test-debs: FAILED: $p is already installed here; not touching it (dpkg --purge $p first)"
    exit 1
  fi
done
had_user=0
getent passwd grl >/dev/null && had_user=1
tmp=$(mktemp -d /tmp/grl-debs-test-XXXXXX)
chmod 0755 "$tmp"
installed=0
cleanup() {
  if [ "$installed" -eq 1 ]; then dpkg_locked --purge "${pkgs[@]}" >/dev/null 2>&1 || true; fi
  if [ "$had_user" -eq 0 ] && getent passwd grl >/dev/null; then
    deluser --system --quiet grl >/dev/null 2>&1 || true
    getent group grl >/dev/null && delgroup --system --quiet grl >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
bad() { echo "test-debs: FAILED: $*"; fail=1; }
# Other engineers' apt-get may hold the dpkg lock for a while: wait for it (up to 5 min).
dpkg_locked() {
  local i out
  for i in $(seq 1 150); do
    if out=$(dpkg "$@" 2>&1); then echo "$out"; return 0; fi
    grep -q "lock" <<<"$out" || { echo "$out"; return 1; }
    sleep 2
  done
  echo "$out"; return 1
}

# Upgrade under a running nginx: upgrade_start starts nginx with the installed module and a
# client asking it every 20 ms; upgrade_check (after dpkg -i of this build) wants the
# package's message that a restart is needed, a reload that keeps every answer 200, the old
# module still mapped after it (what the message says), and the new one after a restart.
serve="$tmp/serve"
upgrade_start() {
  local c="$serve"
  mkdir -p "$c"
  cat >"$c/nginx.conf" <<CONF
include /etc/nginx/modules-enabled/50-mod-http-grl.conf;
error_log $c/error.log notice;
pid $c/nginx.pid;
worker_processes 1;
events {}
http {
    access_log off;
    client_body_temp_path $c/body; proxy_temp_path $c/proxy; fastcgi_temp_path $c/fastcgi;
    uwsgi_temp_path $c/uwsgi; scgi_temp_path $c/scgi;
    grl_zone grl:1m;
    grl_bucket api procedure_prefix=/api rate=1000r/s;
    server { listen unix:$c/serve.sock; location / { grl on; return 200 "ok\\n"; } }
}
CONF
  nginx -c "$c/nginx.conf" >&2 || bad "nginx with the previous build's module did not start"
  ( while [ ! -e "$c/stop" ]; do
      curl -s -o /dev/null -w '%{http_code}\n' --max-time 2 --unix-socket "$c/serve.sock" http://h/api/x
      sleep 0.02
    done >"$c/codes" ) &
}
maps_of_module() {  # the module's lines in the maps of the running nginx's processes
  local pid
  for pid in $(cat "$1/nginx.pid") $(pgrep -P "$(cat "$1/nginx.pid")"); do
    grep ngx_http_grl_module.so "/proc/$pid/maps" || true
  done
}
upgrade_check() {
  local c="$serve" codes
  grep -q "libnginx-mod-http-grl: upgraded from $prev_ver under a running nginx.*Restart nginx" \
    "$tmp/dpkg-i.log" || bad "no restart message from the upgrade under a running nginx:"$'\n'"$(cat "$tmp/dpkg-i.log")"
  nginx -c "$c/nginx.conf" -s reload
  sleep 1
  maps_of_module "$c" | grep -q "(deleted)" ||
    bad "after the reload nginx no longer maps the replaced module: the package's message is wrong"
  touch "$c/stop"
  wait
  codes=$(sort "$c/codes" | uniq -c | tr -s ' ' | tr '\n' ';')
  [ "$(grep -vc '^200$' "$c/codes")" -eq 0 ] && [ "$(grep -c '^200$' "$c/codes")" -gt 20 ] ||
    bad "answers through the upgrade and the reload: $codes (want 200 only)"
  nginx -c "$c/nginx.conf" -s quit
  for _ in $(seq 1 50); do [ -e "$c/nginx.pid" ] || break; sleep 0.1; done
  nginx -c "$c/nginx.conf" || bad "nginx with the upgraded module did not start"
  sleep 0.3
  if maps_of_module "$c" | grep -q "(deleted)" || [ -z "$(maps_of_module "$c")" ]; then
    bad "after a restart nginx does not map the upgraded module"
  fi
  [ "$(curl -s --unix-socket "$c/serve.sock" http://h/api/x)" = ok ] || bad "the restarted nginx does not answer"
  nginx -c "$c/nginx.conf" -s quit
  echo "test-debs: upgraded from $prev_ver under a running nginx: answers $codes the reload kept the old module, a restart loaded the new one"
}

bash "$root/packaging/build-debs.sh" "$build" "$tmp/debs"
mod=$(ls "$tmp"/debs/libnginx-mod-http-grl_*.deb)
dmn=$(ls "$tmp"/debs/grl-daemons_*.deb)
abi=$(sed -n 's/^nginx:abi=//p' /usr/share/nginx/src/debian/libnginx-mod.abisubstvars)
provided=$(dpkg-query -W -f='${Provides}' nginx)
dpkg-deb -f "$mod" Depends | grep -q "^$abi, " || bad "the module does not depend on $abi first"
grep -q "$abi" <<<"$provided" || bad "the installed nginx provides \"$provided\", not $abi"
if command -v lintian >/dev/null; then
  errors=$(lintian "$mod" "$dmn" 2>/dev/null | grep '^E:' || true)
  [ -z "$errors" ] || bad "lintian errors:"$'\n'"$errors"
fi

# A test configuration of Debian's shape: the enabled modules, then the shipped snippets
# (copied out of the installed package, so that the same file is tested after the purge).
conf="$tmp/nginx.conf"
mkdir -p "$tmp/prefix/logs"
cat >"$conf" <<CONF
include /etc/nginx/modules-enabled/*.conf;
error_log $tmp/prefix/logs/error.log;
pid $tmp/prefix/nginx.pid;
events {}
http {
    client_body_temp_path $tmp/prefix/body;
    proxy_temp_path $tmp/prefix/proxy;
    fastcgi_temp_path $tmp/prefix/fastcgi;
    uwsgi_temp_path $tmp/prefix/uwsgi;
    scgi_temp_path $tmp/prefix/scgi;
    access_log off;
    include $tmp/snippets/grl-buckets.conf;
    upstream backend { server 127.0.0.1:9; }
    server {
        listen 127.0.0.1:0;
        include $tmp/snippets/grl-locations.conf;
    }
}
CONF
sed -i 's/listen 127.0.0.1:0;/listen unix:'"${tmp//\//\\/}"'\/prefix\/test.sock;/' "$conf"

# The previous build (the same binaries, a lower version) installed first, serving under a
# running nginx while this build's packages are installed over it.
prev_ver="$(dpkg-deb -f "$mod" Version | sed 's/-[^-]*$//')-0"
GRL_DEB_VERSION=$prev_ver bash "$root/packaging/build-debs.sh" "$build" "$tmp/prev" >/dev/null
installed=1
dpkg_locked -i "$tmp"/prev/libnginx-mod-http-grl_*.deb >"$tmp/dpkg-prev.log" ||
  { cat "$tmp/dpkg-prev.log"; bad "dpkg -i of the previous build failed"; exit 1; }
! grep -q "upgraded from" "$tmp/dpkg-prev.log" || bad "a fresh install speaks of an upgrade"
upgrade_start
dpkg_locked -i "$mod" "$dmn" >"$tmp/dpkg-i.log" || { cat "$tmp/dpkg-i.log"; bad "dpkg -i failed"; exit 1; }
upgrade_check
link=/etc/nginx/modules-enabled/50-mod-http-grl.conf
[ "$(readlink "$link")" = /usr/share/nginx/modules-available/mod-http-grl.conf ] ||
  bad "$link does not point at modules-available/mod-http-grl.conf"
[ -f /usr/lib/nginx/modules/ngx_http_grl_module.so ] || bad "no /usr/lib/nginx/modules/ngx_http_grl_module.so"
mkdir -p "$tmp/snippets"
cp /usr/share/doc/libnginx-mod-http-grl/examples/grl-*.conf "$tmp/snippets/"
if out=$(nginx -t -c "$conf" 2>&1); then
  echo "test-debs: installed: nginx -t with the shipped snippets: ok"
else
  bad "nginx -t with the installed module and the shipped snippets:"$'\n'"$out"
fi
for b in grl-collector grl-controller grlctl grl-rlc; do
  /usr/bin/$b --help >/dev/null 2>&1 || bad "/usr/bin/$b --help does not run"
done
getent passwd grl >/dev/null || bad "no user grl after install"
[ "$(stat -c %G /etc/grl)" = grl ] || bad "/etc/grl is not group grl (grl-rlc serve writes limits.yaml)"
# The installed controller accepts the shipped options and the shipped limits file: it
# starts, binds (loopback, ports chosen here) and answers grlctl.
# shellcheck disable=SC1091
. /etc/grl/controller.env
ctl_args=()
read -r -a shipped <<<"$GRL_CONTROLLER_ARGS"
for ((i = 0; i < ${#shipped[@]}; i++)); do  # this test's state file and ports instead
  case "${shipped[$i]}" in
    --state-file | --metrics-bind | --usage-bind | --publish-bind | --admin-bind) i=$((i + 1)) ;;
    *) ctl_args+=("${shipped[$i]}") ;;
  esac
done
ep="$tmp/ctl.json"
/usr/bin/grl-controller "${ctl_args[@]}" --state-file "$tmp/state.json" --metrics-bind 127.0.0.1:0 \
  --usage-bind 'tcp://127.0.0.1:*' --publish-bind 'tcp://127.0.0.1:*' --admin-bind 'tcp://127.0.0.1:*' \
  --endpoints-file "$ep" >"$tmp/ctl.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -s "$ep" ] && break; sleep 0.05; done
if [ -s "$ep" ]; then
  admin=$(sed -n 's/.*"admin": *"\([^"]*\)".*/\1/p' "$ep")
  /usr/bin/grlctl --controller "$admin" status >"$tmp/status.txt" 2>&1 ||
    bad "grlctl status against the installed controller:"$'\n'"$(cat "$tmp/status.txt")"
  grep -q "/etc/grl/limits.yaml" "$tmp/status.txt" || bad "the controller does not report /etc/grl/limits.yaml:"$'\n'"$(cat "$tmp/status.txt")"
else
  bad "the installed grl-controller with /etc/grl/controller.env did not start:"$'\n'"$(tail -5 "$tmp/ctl.log")"
fi
# The collector likewise, with collector-example.env's options (as the template unit runs it).
# shellcheck disable=SC1091
. /etc/grl/collector-example.env
col_args=()
read -r -a shipped <<<"$GRL_COLLECTOR_ARGS"
for ((i = 0; i < ${#shipped[@]}; i++)); do
  case "${shipped[$i]}" in
    --metrics-bind | --report-bind | --publish-bind) i=$((i + 1)) ;;
    *) col_args+=("${shipped[$i]}") ;;
  esac
done
cep="$tmp/col.json"
/usr/bin/grl-collector --zone zone-a "${col_args[@]}" --metrics-bind 127.0.0.1:0 \
  --report-bind 'tcp://127.0.0.1:*' --publish-bind 'tcp://127.0.0.1:*' --endpoints-file "$cep" \
  >"$tmp/col.log" 2>&1 &
cpid=$!
for _ in $(seq 1 100); do [ -s "$cep" ] && break; sleep 0.05; done
[ -s "$cep" ] || bad "the installed grl-collector with /etc/grl/collector-example.env did not start:"$'\n'"$(tail -5 "$tmp/col.log")"
kill "$cpid" "$pid" 2>/dev/null || true
wait "$cpid" "$pid" 2>/dev/null || true
if command -v systemd-analyze >/dev/null; then
  cp /lib/systemd/system/grl-collector@.service "$tmp/grl-collector@zone-a.service"
  out=$(cd "$tmp" && systemd-analyze verify ./grl-collector@zone-a.service \
        /lib/systemd/system/grl-controller.service /lib/systemd/system/grl-rlc.service \
        /lib/systemd/system/grl-rlc-record.service 2>&1) || true
  [ -z "$out" ] || bad "systemd-analyze verify of the installed units:"$'\n'"$out"
fi

dpkg_locked --purge "${pkgs[@]}" >"$tmp/dpkg-purge.log" || { cat "$tmp/dpkg-purge.log"; bad "dpkg --purge failed"; }
installed=0
for f in /usr/lib/nginx/modules/ngx_http_grl_module.so "$link" /etc/grl /usr/bin/grl-controller \
         /lib/systemd/system/grl-controller.service; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || bad "$f is still there after dpkg --purge"
done
if out=$(nginx -t -c "$conf" 2>&1); then
  bad "nginx -t passes without the module: the check above proved nothing"
else
  grep -q 'unknown directive "grl_zone"' <<<"$out" || bad "nginx -t without the module: $out"
fi
[ "$fail" -eq 0 ] && echo "test-debs: $(basename "$mod") and $(basename "$dmn") built, installed, checked and purged"
exit "$fail"
