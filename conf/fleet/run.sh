#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what is missing, builds,
# and runs a local grl fleet on loopback limiting real traffic (see
# run-fleet.py for what it starts and prints). Ctrl-C stops everything.
# Usage: bash conf/fleet/run.sh [run-fleet.py options, e.g. --limit 300 --surge]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/install-deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
exec /usr/bin/python3 conf/fleet/run-fleet.py --build-dir build "$@"
