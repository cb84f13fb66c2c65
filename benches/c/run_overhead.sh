#!/usr/bin/env bash
# Builds the C overhead benchmarks (Release, into build-bench/) and runs graphsched and oneTBB
# side by side on the same workloads, at 2 threads and at 1 (and graphsched without an executor,
# against oneTBB on 1; and graphsched forced onto 2 threads, GS_RUN_FORCE_EXECUTOR, against
# oneTBB on 2), then prints their ratios. Installs libtbb-dev with apt-get if it is missing.
#
# Side by side means workload by workload: oneTBB on one workload, then graphsched on the same,
# then the next workload, ROUNDS times over. On a shared machine a program's times move by 2x
# from one second to the next (a neighbour on the same core comes and goes): each round's ratio
# compares two programs run within a second of each other, and the table gives the median of
# the rounds' ratios (and their range) with each program's median time.
# Usage: benches/c/run_overhead.sh   (env: ROUNDS=5, JOBS=1 build parallelism, TIMEOUT=300 s
# per program)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
limit="${TIMEOUT:-300}"
rounds="${ROUNDS:-5}"
source "$root/benches/c/bench_setup.sh"
have_tbb=0
# overhead_tbb exists only when find_package(TBB CONFIG) succeeded at configure time.
if grep -q '^TBB_DIR:PATH=' "$build/CMakeCache.txt" && \
   ! grep -q '^TBB_DIR:PATH=.*NOTFOUND' "$build/CMakeCache.txt"; then
  cmake --build "$build" -j "$jobs" --target overhead_tbb
  have_tbb=1
fi
have_gs=1
cmake --build "$build" -j "$jobs" --target overhead_graphsched || have_gs=0

status=0
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
workloads=(chain fanout tree layered single pair)

# one CONFIG ROUND SYSTEM ENV... -- PROGRAM WORKLOAD: runs one workload, prints its line and
# keeps it tagged with its configuration and round.
one() {
  local config=$1 round=$2 system=$3; shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local line
  if line="$(env "${envs[@]}" timeout "$limit" "$1" "$2")"; then
    echo "$line"
    echo "$config $round $line" >> "$out"
  else
    echo "$system exited with $? on $2 (124 = timeout)"; status=1
  fi
}

# config NAME TITLE TBB_ENV GS_ENV [WORKLOADS]: every round of one configuration, on every
# workload or the ones named.
config() {
  local name=$1 title=$2 tbb_env=$3 gs_env=$4
  local -a only=("${workloads[@]}")
  [ $# -ge 5 ] && read -r -a only <<< "$5"
  echo
  echo "== per-node overhead, $title (construction excluded; median of 5 per line, $rounds rounds) =="
  [ "$have_tbb" -eq 1 ] || echo "tbb        (not built: oneTBB not found)"
  [ "$have_gs" -eq 1 ] || { echo "graphsched (not built: see the build errors above)"; status=1; }
  for round in $(seq "$rounds"); do
    for w in "${only[@]}"; do
      # shellcheck disable=SC2086 # the env strings are lists of assignments
      [ "$have_tbb" -eq 1 ] && one "$name" "$round" tbb $tbb_env -- "$build/benches/c/overhead_tbb" "$w"
      # shellcheck disable=SC2086
      [ "$have_gs" -eq 1 ] && one "$name" "$round" graphsched $gs_env -- "$build/benches/c/overhead_graphsched" "$w"
    done
  done
}

config 2 "2 threads" "OH_THREADS=2" "OH_THREADS=2"
config 1 "1 thread" "OH_THREADS=1" "OH_THREADS=1"
# graphsched without an executor (sequential runs on the calling thread), against oneTBB on 1.
config seq "sequential graphsched (no executor; compared with oneTBB on 1 thread)" \
  "OH_THREADS=1" "OH_SEQUENTIAL=1"
# graphsched kept on the executor's threads (GS_RUN_FORCE_EXECUTOR): what its queues cost, where
# the runs above go on the caller alone (a chain; kernels too short to pay for the threads).
config 2-forced "graphsched forced onto the executor (2 threads; compared with oneTBB on 2)" \
  "OH_THREADS=2" "OH_THREADS=2 OH_FORCE_EXECUTOR=1"
# The round trips again, runs reading no clock for their wall time (GS_RUN_NO_WALL_TIME): oneTBB's
# graphs time nothing, and two reads of the clock are a fifth of a one-node run.
config 1-untimed "round trips reading no clock (GS_RUN_NO_WALL_TIME; 1 thread)" \
  "OH_THREADS=1" "OH_THREADS=1 OH_NO_WALL_TIME=1" "single pair"

# graphsched / oneTBB per configuration and workload: each program's median over the rounds,
# and the median (lowest, highest) of the rounds' own ratios.
echo
echo "== graphsched / oneTBB, $rounds rounds side by side (below 1: graphsched is faster) =="
awk '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    k = $1 " " $4; unit[$4] = $6
    if ($3 == "tbb") { tbb[k] = tbb[k] " " $5; last[k " " $2] = $5 }
    if ($3 == "graphsched") {
      gs[k] = gs[k] " " $5
      if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      if ((k " " $2) in last) {
        r = $5 / last[k " " $2]; ratios[k] = ratios[k] " " r
        if (!(k in lo) || r < lo[k]) lo[k] = r
        if (!(k in hi) || r > hi[k]) hi[k] = r
      }
    }
  }
  END {
    printf "%-8s %-16s %12s %12s %8s  %-15s\n", "threads", "workload", "graphsched", "tbb", "ratio", "(range)"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, " ")
      if (k in ratios) printf "%-8s %-16s %12.2f %12.2f %7.2fx  (%.2f-%.2f)  %s\n", p[1], p[2], median(gs[k]), median(tbb[k]), median(ratios[k]), lo[k], hi[k], unit[p[2]]
      else printf "%-8s %-16s %12.2f %12s %8s  %-15s  %s\n", p[1], p[2], median(gs[k]), "-", "-", "", unit[p[2]]
    }
  }' "$out"
exit "$status"
