#!/usr/bin/env bash
# grl's benchmark suite in one command (bench/README.md): builds what it needs, runs every
# experiment, writes bench/results/REPORT.md with its PNG plots.
#
# Usage: bench/run_all.sh [--quick] [--only micro,request_path,redis_trouble,fleet]
#   --quick   1 round and short runs: a smoke test of the suite (not evidence)
# Environment: GRL_BUILD_DIR (default: build/ in the repository), GRL_BENCH_SUT_CPU (0),
#   GRL_BENCH_LOAD_CPU (1), JOBS (build parallelism, default 2).
# About 12 minutes on a quiet 2-core machine once built; run it with nothing else running.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${GRL_BUILD_DIR:-$root/build}
export GRL_BUILD_DIR=$build
py=/usr/bin/python3  # Debian's: zmq, msgpack, matplotlib

quick=0
only="micro,request_path,redis_trouble,fleet"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only=$2; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

for tool in wrk redis-server taskset /usr/sbin/nginx; do
  command -v "$tool" >/dev/null || { echo "run_all.sh: $tool missing (bash .ci/install-deps)" >&2; exit 2; }
done
$py -c 'import zmq, msgpack, matplotlib' 2>/dev/null ||
  { echo "run_all.sh: $py lacks zmq/msgpack/matplotlib (bash .ci/install-deps)" >&2; exit 2; }
if [ "$(nproc)" -lt 2 ]; then
  echo "run_all.sh: needs 2 cores (system under test and load generator pinned apart)" >&2; exit 2
fi

# Build (incremental): the module, the Redis baseline, the control plane, the tools.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
logs=$(mktemp -d /tmp/grl-bench-build.XXXXXX)
targets=(ngx_http_grl_module ngx_http_redis_limit_module grl_loadgen grl_delay_proxy grl_zone_memory
         grl_decision_bench grl-collector grl-controller)
build_failed=0
for t in "${targets[@]}"; do
  # A target that does not exist in this checkout is reported by the experiment that needs it.
  if ! nice cmake --build "$build" -j "${JOBS:-2}" --target "$t" >"$logs/$t.log" 2>&1; then
    echo "run_all.sh: building $t failed or it does not exist (see $logs/$t.log)" >&2
    build_failed=1
  fi
done
[ $build_failed = 0 ] && rm -rf "$logs"

# Only the outputs of the experiments run are replaced (the report is rendered from every
# result present); other files in bench/results/ are left alone.
results=$root/bench/results
mkdir -p "$results/raw"
for name in ${only//,/ }; do rm -f "$results/raw/$name.json"; done
rm -f "$results"/{REPORT,HEADLINE}.md \
      "$results"/{request_path_latency,redis_trouble_latency,fleet_admitted_vs_offered}.png

if [ $quick = 1 ]; then
  a_micro=(--repetitions 3 --min-time 0.1)
  a_rp=(--rounds 1 --fixed-seconds 2 --sat-seconds 2)
  a_rt=(--rounds 1 --seconds 2)
  a_fl=(--rounds 1 --phases base:0.5:2,step:1.5:8,recover:0.5:3,surge:7.5:6,after:0.5:3
        --accuracy-window 3)
else
  a_micro=(); a_rp=(); a_rt=(); a_fl=()
fi

start=$(date +%s)
failed=()
run() {
  local name=$1; shift
  case ",$only," in *",$name,"*) ;; *) return 0 ;; esac
  echo "=== $name: $*"
  (cd "$root/bench" && $py "$@") || failed+=("$name")
}
run micro exp_micro.py ${a_micro[@]+"${a_micro[@]}"}
run request_path exp_request_path.py ${a_rp[@]+"${a_rp[@]}"}
run redis_trouble exp_redis_trouble.py ${a_rt[@]+"${a_rt[@]}"}
run fleet exp_fleet.py ${a_fl[@]+"${a_fl[@]}"}
elapsed=$(( $(date +%s) - start ))

cmd="bench/run_all.sh"
[ $quick = 1 ] && cmd="$cmd --quick"
[ "$only" != "micro,request_path,redis_trouble,fleet" ] && cmd="$cmd --only $only"
(cd "$root/bench" && $py report.py --command "$cmd" --elapsed "$elapsed")
echo "bench/results/REPORT.md written in $((elapsed / 60)) min $((elapsed % 60)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_all.sh: failed: ${failed[*]}" >&2
  exit 1
fi
