#!/usr/bin/env bash
# The kernel-size benchmark (run_kernels.sh) for graphsched at another revision, graphsched here
# and oneTBB, in turn (the order rotates by round), ROUNDS times: each row gives each one's median
# and the medians of the rounds' own ratios, here / REV and here / oneTBB. REV is built in a git
# worktree beside the repository (removed afterwards), unless REV_BIN names its
# kernels_graphsched already built.
# Usage: benches/c/compare_kernels.sh REV [ROUNDS] [CONFIGS]
#   CONFIGS: of 2, 2-forced, 1, 1-forced (as run_kernels.sh; default "2-forced 1-forced").
#   env: SIZES="1 5 20", WORKLOADS (default all five), BUILD, JOBS, REV_BIN.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rev="${1:?usage: benches/c/compare_kernels.sh REV [ROUNDS] [CONFIGS]}"
rounds="${2:-7}"
read -r -a configs <<< "${3:-2-forced 1-forced}"
read -r -a sizes <<< "${SIZES:-1 5 20}"
read -r -a workloads <<< "${WORKLOADS:-layered16x2 layered16x8 layered16x32 forkjoin random500}"
source "$root/benches/c/bench_setup.sh"
cmake --build "$build" -j "$jobs" --target kernels_graphsched kernels_tbb >/dev/null

out="$(mktemp)"
other=""
cleanup() { [ -z "$other" ] || git -C "$root" worktree remove --force "$other" 2>/dev/null || true; rm -f "$out"; }
trap cleanup EXIT
rev_bin="${REV_BIN:-}"
if [ -z "$rev_bin" ]; then
  other="$(mktemp -d)/graphsched-$rev"
  git -C "$root" worktree add --detach "$other" "$rev" >/dev/null
  cmake -S "$other" -B "$other/build-bench" -DCMAKE_BUILD_TYPE=Release \
        -DGRAPHSCHED_BUILD_BENCHMARKS=ON -DGRAPHSCHED_BUILD_TESTS=OFF >/dev/null
  cmake --build "$other/build-bench" -j "$jobs" --target kernels_graphsched >/dev/null
  rev_bin="$other/build-bench/benches/c/kernels_graphsched"
fi
progs=(tbb "$build/benches/c/kernels_tbb" rev "$rev_bin" here "$build/benches/c/kernels_graphsched")

for round in $(seq "$rounds"); do
  for config in "${configs[@]}"; do
    threads="${config%%-*}"
    for w in "${workloads[@]}"; do
      for us in "${sizes[@]}"; do
        for k in 0 1 2; do
          i=$(( (k + round) % 3 ))
          who="${progs[2 * i]}" prog="${progs[2 * i + 1]}"
          env=("KS_THREADS=$threads")
          [ "$who" = tbb ] || [ "$config" = "$threads" ] || env+=("KS_FORCE_EXECUTOR=1")
          env "${env[@]}" nice "$prog" "$w" "$us" | awk -v c="$config" -v r="$round" -v who="$who" '{ print c, r, who, $2, $3 }' >> "$out"
        done
      done
    done
  done
done

echo "$rounds rounds in turns, us per run: medians, and medians (range) of each round's ratio"
python3 - "$out" "$rev" <<'PY'
import collections, statistics, sys
t, order = collections.defaultdict(dict), []
for line in open(sys.argv[1]):
    config, rnd, who, workload, us = line.split()
    key = (config, workload)
    if key not in t: order.append(key)
    t[key][(who, rnd)] = float(us)
print(f"{'config':<9} {'workload':<20} {sys.argv[2][:10]:>10} {'here':>10} {'oneTBB':>10}  {'here/rev':<20} {'here/tbb':<20}")
for key in order:
    d = t[key]
    rounds = sorted({r for (_, r) in d})
    med = {w: statistics.median([d[(w, r)] for r in rounds]) for w in ("rev", "here", "tbb")}
    cells = []
    for o in ("rev", "tbb"):
        q = [d[("here", r)] / d[(o, r)] for r in rounds]
        cells.append(f"{statistics.median(q):.3f}x ({min(q):.2f}-{max(q):.2f})")
    print(f"{key[0]:<9} {key[1]:<20} {med['rev']:>10.2f} {med['here']:>10.2f} {med['tbb']:>10.2f}  {cells[0]:<20} {cells[1]:<20}")
PY
