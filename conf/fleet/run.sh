#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what is missing, builds,
# and runs a local grl fleet on loopback limiting real traffic (see
# run-fleet.py for what it starts and prints). Ctrl-C stops everything.
# Usage: bash conf/fleet/run.sh [run-fleet.py options, e.g. --limit 300 --surge]
#   --duration N   run N seconds, then exit 0 only if the fleet held the limit (CI uses it)
# Works from any working directory; every path handed to nginx or a daemon is absolute.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
bash .ci/install-deps
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$root/build" -j "$(nproc)"
# Debian's interpreter: python3 on PATH may be a pyenv or venv one (run-fleet.py needs only
# the standard library, but the same interpreter everywhere keeps surprises out)
exec /usr/bin/python3 "$root/conf/fleet/run-fleet.py" --build-dir "$root/build" "$@"
