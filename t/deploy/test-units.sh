#!/usr/bin/env bash
# The systemd units of conf/systemd/ (docs/operations.md, "systemd"): systemd-analyze verify
# finds nothing to say about them (any line it prints fails the test: it warns, and exits 0,
# on an unknown key), each has what the deployment promises (Restart=on-failure, SIGHUP as
# ExecReload where the daemon reloads on it, the hardening options), and each one's exposure
# (systemd-analyze security --offline) is at most 2.0 of 10. ExecStart is pointed at the build
# directory's programs, since verify checks that they exist and are executable.
# Usage: bash t/deploy/test-units.sh BUILD_DIR      (exit 77: skipped, no systemd-analyze)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: test-units.sh BUILD_DIR}" && pwd)
if ! command -v systemd-analyze >/dev/null; then
  echo "test-units: SKIPPED: no systemd-analyze (apt-get install systemd)"
  exit 77
fi
tmp=$(mktemp -d /tmp/grl-units-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "test-units: FAILED: $*"; fail=1; }

# The checker itself must speak up on a broken unit, or silence would prove nothing.
printf '[Service]\nExecStart=/bin/true\nProtectSytem=strict\n' >"$tmp/typo.service"
if [ -z "$(systemd-analyze verify "$tmp/typo.service" 2>&1)" ]; then
  bad "systemd-analyze verify says nothing about an unknown key; it cannot check the units"
fi
rm "$tmp/typo.service"

declare -A bin=([grl-collector]=collector [grl-controller]=controller [grl-rlc]=rlc)
units=()
for f in "$root"/conf/systemd/*.service; do
  name=$(basename "$f")
  [ "$name" = "grl-collector@.service" ] && name="grl-collector@zone-a.service"  # an instance
  out="$tmp/$name"
  cp "$f" "$out"
  for b in "${!bin[@]}"; do
    sed -i "s#/usr/bin/$b #$build/${bin[$b]}/$b #" "$out"
  done
  units+=("$out")
  grep -q '^Restart=on-failure$' "$f" || bad "$f: no Restart=on-failure"
  for key in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
             CapabilityBoundingSet= SystemCallFilter=@system-service; do
    grep -q "^$key\$" "$f" || bad "$f: no $key"
  done
  case "$name" in
    grl-controller.service | grl-collector@*)
      grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' "$f" || bad "$f: no SIGHUP as ExecReload" ;;
    grl-rlc.service | grl-rlc-record.service)
      # grl-rlc has no SIGHUP handler: the default action would end it, so no ExecReload
      ! grep -q '^ExecReload=' "$f" || bad "$f: ExecReload would send grl-rlc a signal that ends it" ;;
  esac
done
[ ${#units[@]} -eq 4 ] || bad "expected 4 units in conf/systemd, found ${#units[@]}"

out=$(cd "$tmp" && systemd-analyze verify "${units[@]}" 2>&1) || bad "systemd-analyze verify exited non-zero"
if [ -n "$out" ]; then
  bad "systemd-analyze verify:"
  echo "$out"
fi
for u in "${units[@]}"; do
  score=$(cd "$tmp" && systemd-analyze security --offline=yes "$u" 2>&1 | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
  echo "test-units: $(basename "$u"): exposure $score (systemd-analyze security --offline=yes)"
  (cd "$tmp" && systemd-analyze security --offline=yes --threshold=20 "$u" >/dev/null 2>&1) ||
    bad "$(basename "$u"): exposure $score is above 2.0"
done
[ "$fail" -eq 0 ] && echo "test-units: ${#units[@]} units verified"
exit "$fail"
