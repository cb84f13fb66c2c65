#!/usr/bin/env bash
# Builds the C overhead benchmarks (Release, into build-bench/) and runs graphsched and oneTBB
# side by side on the same workloads, at 2 threads and at 1 (and graphsched without an executor,
# against oneTBB on 1; and graphsched forced onto 2 threads, GS_RUN_FORCE_EXECUTOR, against
# oneTBB on 2), then prints their ratios. Installs libtbb-dev with apt-get if it is missing.
# Usage: benches/c/run_overhead.sh   (env: JOBS=1 build parallelism, TIMEOUT=300 s per program)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
limit="${TIMEOUT:-300}"
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
for threads in 2 1; do
  echo
  echo "== per-node overhead, $threads thread(s) (construction excluded, median of 5) =="
  echo "threads $threads" >> "$out"
  if [ "$have_tbb" -eq 1 ]; then
    OH_THREADS=$threads timeout "$limit" "$build/benches/c/overhead_tbb" | tee -a "$out" ||
      { echo "overhead_tbb exited with $? (124 = timeout)"; status=1; }
  else
    echo "tbb        (not built: oneTBB not found)"
  fi
  if [ "$have_gs" -eq 1 ]; then
    OH_THREADS=$threads timeout "$limit" "$build/benches/c/overhead_graphsched" | tee -a "$out" ||
      { echo "overhead_graphsched exited with $? (124 = timeout)"; status=1; }
  else
    echo "graphsched (not built: see the build errors above)"; status=1
  fi
done

# graphsched without an executor (sequential runs on the calling thread), against oneTBB on 1.
echo
echo "== per-node overhead, sequential graphsched (no executor; compared with oneTBB on 1 thread) =="
echo "threads seq" >> "$out"
if [ "$have_gs" -eq 1 ]; then
  OH_SEQUENTIAL=1 timeout "$limit" "$build/benches/c/overhead_graphsched" | tee -a "$out" ||
    { echo "overhead_graphsched exited with $? (124 = timeout)"; status=1; }
fi

# graphsched kept on the executor's threads (GS_RUN_FORCE_EXECUTOR): what its queues cost, where
# the runs above go on the caller alone (a chain; kernels too short to pay for the threads).
echo
echo "== per-node overhead, graphsched forced onto the executor (2 threads; compared with oneTBB on 2) =="
echo "threads 2-forced" >> "$out"
if [ "$have_gs" -eq 1 ]; then
  OH_THREADS=2 OH_FORCE_EXECUTOR=1 timeout "$limit" "$build/benches/c/overhead_graphsched" | tee -a "$out" ||
    { echo "overhead_graphsched exited with $? (124 = timeout)"; status=1; }
fi

# graphsched / oneTBB per workload and thread count, from the lines above (this run only).
echo
echo "== graphsched / oneTBB (below 1: graphsched is faster) =="
awk '
  $1 == "threads" { t = $2; next }
  $1 == "tbb" { tbb[t " " $2] = $3; unit[$2] = $4; next }
  $1 == "graphsched" { gs[t " " $2] = $3; order[++n] = t " " $2 }
  END {
    printf "%-8s %-16s %12s %12s %8s\n", "threads", "workload", "graphsched", "tbb", "ratio"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, " ")
      tk = (p[1] == "seq") ? "1 " p[2] : (p[1] == "2-forced") ? "2 " p[2] : k
      if (tk in tbb) printf "%-8s %-16s %12.2f %12.2f %7.2fx  %s\n", p[1], p[2], gs[k], tbb[tk], gs[k] / tbb[tk], unit[p[2]]
      else printf "%-8s %-16s %12.2f %12s %8s  %s\n", p[1], p[2], gs[k], "-", "-", unit[p[2]]
    }
  }' "$out"
exit "$status"
