#!/usr/bin/env bash
# The fuzzers for longer than CI runs them: every harness for SECONDS (default 600), then
# a summary of executions and crashes per harness. Same build and corpus as .ci/fuzz.
# Usage: bench/fuzz.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
echo "command: bench/fuzz.sh $secs   ($(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD))"
bash .ci/fuzz "$secs" build-fuzz
