#!/usr/bin/env bash
# Times graphsched at another revision, graphsched here and oneTBB on the overhead workloads,
# in turn, ROUNDS times, and prints each one's minimum and median with the ratios: on a shared
# machine, where the same binary's times drift by 2x from one minute to the next, only programs
# run side by side, many times, compare. The other revision is built in a git worktree beside the
# repository (removed afterwards).
# Check the tool first with REV = HEAD (the same source, built in the worktree): binaries built
# in the two places differ by themselves on some rows (2026-12-04: the fan-out forced onto 2
# threads read 1.09x against itself, the minimums 1.16x).
# Usage: benches/c/compare_overhead.sh REV [ROUNDS] [THREADS]
#   THREADS: 2 (default), 1, seq (graphsched without an executor, against oneTBB on 1), or
#   forced (graphsched kept on its 2 threads, GS_RUN_FORCE_EXECUTOR, against oneTBB on 2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rev="${1:?usage: benches/c/compare_overhead.sh REV [ROUNDS] [THREADS]}"
rounds="${2:-12}"
threads="${3:-2}"
source "$root/benches/c/bench_setup.sh"
cmake --build "$build" -j "$jobs" --target overhead_graphsched overhead_tbb >/dev/null

other="$(mktemp -d)/graphsched-$rev"
out="$(mktemp)"
cleanup() { git -C "$root" worktree remove --force "$other" 2>/dev/null || true; rm -f "$out"; }
trap cleanup EXIT
git -C "$root" worktree add --detach "$other" "$rev" >/dev/null
cmake -S "$other" -B "$other/build-bench" -DCMAKE_BUILD_TYPE=Release \
      -DGRAPHSCHED_BUILD_BENCHMARKS=ON -DGRAPHSCHED_BUILD_TESTS=OFF >/dev/null
cmake --build "$other/build-bench" -j "$jobs" --target overhead_graphsched >/dev/null

# run NAME PROGRAM: one round of PROGRAM, its lines tagged with NAME.
run() {
  local env=("OH_THREADS=$threads")
  if [ "$threads" = forced ]; then
    env=("OH_THREADS=2")
    [ "$1" = tbb ] || env+=("OH_FORCE_EXECUTOR=1")
  fi
  if [ "$threads" = seq ]; then
    env=("OH_SEQUENTIAL=1")
    [ "$1" = tbb ] && env=("OH_THREADS=1")
  fi
  env "${env[@]}" "$2" | awk -v who="$1" '{ print who, $2, $3, $4 }' >> "$out"
}
# The order rotates by round, so that a program's place in the sequence (what ran just before it)
# does not fall on one side of every pair.
programs=(tbb "$rev" here)
paths=("$build/benches/c/overhead_tbb" "$other/build-bench/benches/c/overhead_graphsched" "$build/benches/c/overhead_graphsched")
for round in $(seq "$rounds"); do
  for k in 0 1 2; do
    i=$(( (round + k) % 3 ))
    run "${programs[$i]}" "${paths[$i]}"
  done
done

echo "threads $threads, $rounds rounds: minimum (median); ratios of minimums, and medians of each round's ratio"
python3 - "$out" "$rev" <<'PY'
import collections, statistics, sys
times, units = collections.defaultdict(list), {}
for line in open(sys.argv[1]):
    who, workload, value, unit = line.split()
    times[(workload, who)].append(float(value))
    units[workload] = unit
rev = sys.argv[2]
# Ratios of minimums, and the median of each round's own ratio (programs of one round ran
# seconds apart, so a slow minute moves both): the second is the steadier on a busy machine.
print(f"{'workload':<18} {'unit':<8} {rev[:12]:>18} {'here':>18} {'tbb':>18} {'here/rev':>9} {'here/tbb':>9}"
      f" {'paired/rev':>11} {'paired/tbb':>11}")
for workload in sorted(units):
    row = [times[(workload, who)] for who in (rev, "here", "tbb")]
    cells = [f"{min(t):.2f} ({statistics.median(t):.2f})" for t in row]
    paired = [statistics.median(h / o for h, o in zip(row[1], other)) for other in (row[0], row[2])]
    print(f"{workload:<18} {units[workload]:<8} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18} "
          f"{min(row[1]) / min(row[0]):>8.2f}x {min(row[1]) / min(row[2]):>8.2f}x"
          f" {paired[0]:>10.2f}x {paired[1]:>10.2f}x")
PY
