#!/usr/bin/env bash
# The kernel-size benchmark (issue 40): graphsched and oneTBB's flow graph side by side on the
# same DAGs of spinning kernels (benches/c/kernels_common.h: layered 16 deep and 2, 8 or 32 wide,
# fork-join 1-64-1 eight times, a random 500-node DAG with lognormal durations), at kernel sizes
# of 1, 5 and 20 us, in three configurations:
#   2         2 threads, graphsched free to run a graph on its caller alone;
#   2-forced  2 threads, graphsched's runs kept on its executor (GS_RUN_FORCE_EXECUTOR);
#   1         1 thread;
#   1-forced  1 thread, graphsched's runs kept on its executor (its queues, no worker).
# Builds both programs (Release, as run_overhead.sh does; BUILD sets the build directory,
# default build-bench/ in this repository) and installs libtbb-dev with apt-get if it is missing.
#
# In turns: for every round, configuration, workload and kernel size, one program then the other
# (which goes first alternates by round), each a process of its own that prints the median of
# its samples (wall time per run, construction excluded). On a shared machine times drift by
# 2x from one minute to the next, so the table gives each program's median over the rounds and
# the median (lowest-highest) of the rounds' own ratios, graphsched / oneTBB: below 1 graphsched
# is faster. "ns/node" is (graphsched - oneTBB) / nodes, from the medians: what graphsched costs
# a node more (negative: less).
# Usage: benches/c/run_kernels.sh   (env: ROUNDS=5, SIZES="1 5 20", WORKLOADS="...", CONFIGS,
#   JOBS=1 build parallelism, BUILD, TIMEOUT=120 s per program, OUT=file to keep the raw lines)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
limit="${TIMEOUT:-120}"
rounds="${ROUNDS:-5}"
read -r -a sizes <<< "${SIZES:-1 5 20}"
read -r -a workloads <<< "${WORKLOADS:-layered16x2 layered16x8 layered16x32 forkjoin random500}"
read -r -a configs <<< "${CONFIGS:-2 2-forced 1 1-forced}"
source "$root/benches/c/bench_setup.sh"
cmake --build "$build" -j "$jobs" --target kernels_graphsched kernels_tbb >/dev/null \
  || { echo "build failed (kernels_tbb needs oneTBB: libtbb-dev)"; exit 1; }
gs="$build/benches/c/kernels_graphsched"
tbb="$build/benches/c/kernels_tbb"

out="${OUT:-$(mktemp)}"
[ -n "${OUT:-}" ] || trap 'rm -f "$out"' EXIT
: > "$out"
status=0

# one CONFIG ROUND SYSTEM PROGRAM WORKLOAD SIZE ENV...: runs one program once, prints its line
# and keeps it tagged with its configuration and round.
one() {
  local config=$1 round=$2 system=$3 prog=$4 w=$5 us=$6; shift 6
  local line
  if line="$(env "$@" timeout "$limit" nice "$prog" "$w" "$us")"; then
    echo "$config $line"
    echo "$config $round $line" >> "$out"
  else
    echo "$system exited with $? on $w $us us (124 = timeout)"; status=1
  fi
}

echo "== kernel sizes: graphsched and oneTBB in turns, $rounds rounds, configurations: ${configs[*]} =="
for round in $(seq "$rounds"); do
  for config in "${configs[@]}"; do
    threads="${config%%-*}"
    gs_env=("KS_THREADS=$threads")
    [ "$config" = "$threads" ] || gs_env+=("KS_FORCE_EXECUTOR=1")
    for w in "${workloads[@]}"; do
      for us in "${sizes[@]}"; do
        if [ $((round % 2)) -eq 1 ]; then
          one "$config" "$round" tbb "$tbb" "$w" "$us" "KS_THREADS=$threads"
          one "$config" "$round" graphsched "$gs" "$w" "$us" "${gs_env[@]}"
        else
          one "$config" "$round" graphsched "$gs" "$w" "$us" "${gs_env[@]}"
          one "$config" "$round" tbb "$tbb" "$w" "$us" "KS_THREADS=$threads"
        fi
      done
    done
  done
done

echo
echo "== graphsched / oneTBB, $rounds rounds in turns (us per run; below 1: graphsched is faster) =="
python3 - "$out" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(dict)   # (config, workload) -> {(system, round): us}
nodes, order = {}, []
for line in open(sys.argv[1]):
    f = line.split()
    config, rnd, system, workload, us = f[0], f[1], f[2], f[3], float(f[4])
    key = (config, workload)
    if key not in nodes:
        order.append(key)
    nodes[key] = int(f[6].lstrip("("))
    times[key][(system, rnd)] = us
print(f"{'config':<9} {'workload':<20} {'graphsched':>11} {'oneTBB':>11} {'ratio':>7}  {'(range)':<13} {'ns/node':>8}")
over = 0
for key in order:
    t = times[key]
    rounds = sorted({r for (_, r) in t})
    gs = [t[("graphsched", r)] for r in rounds if ("graphsched", r) in t]
    tb = [t[("tbb", r)] for r in rounds if ("tbb", r) in t]
    ratios = [t[("graphsched", r)] / t[("tbb", r)] for r in rounds
              if ("graphsched", r) in t and ("tbb", r) in t]
    if not ratios:
        continue
    g, b, m = statistics.median(gs), statistics.median(tb), statistics.median(ratios)
    over += m > 1.03
    per_node = (g - b) * 1000 / nodes[key]
    print(f"{key[0]:<9} {key[1]:<20} {g:>11.2f} {b:>11.2f} {m:>6.2f}x  "
          f"({min(ratios):.2f}-{max(ratios):.2f})   {per_node:>8.1f}")
print(f"rows over 1.03x: {over} of {len(order)}")
PY
exit "$status"
