#!/usr/bin/env bash
# Builds the C overhead benchmarks (Release, into build-bench/) and runs graphsched and oneTBB
# side by side on the same workloads. Installs libtbb-dev with apt-get if it is missing.
# Usage: benches/c/run_overhead.sh   (env: JOBS=1 build parallelism, TIMEOUT=300 s per program)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$root/build-bench"
jobs="${JOBS:-1}"
limit="${TIMEOUT:-300}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-$jobs}"

if [ ! -f /usr/include/oneapi/tbb.h ] && ! dpkg -s libtbb-dev >/dev/null 2>&1; then
  echo "libtbb-dev missing: installing it with apt-get"
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update
  $sudo_cmd apt-get install -y libtbb-dev
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DGRAPHSCHED_BUILD_BENCHMARKS=ON -DGRAPHSCHED_BUILD_TESTS=OFF
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
echo
echo "== per-node overhead, 2 threads (construction excluded, median of 5) =="
if [ "$have_tbb" -eq 1 ]; then
  timeout "$limit" "$build/benches/c/overhead_tbb" || { echo "overhead_tbb exited with $? (124 = timeout)"; status=1; }
else
  echo "tbb        (not built: oneTBB not found)"
fi
if [ "$have_gs" -eq 1 ]; then
  timeout "$limit" "$build/benches/c/overhead_graphsched" || { echo "overhead_graphsched exited with $? (124 = timeout)"; status=1; }
else
  echo "graphsched (not built: see the build errors above)"; status=1
fi
exit "$status"
