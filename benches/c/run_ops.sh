#!/usr/bin/env bash
# Intra-op and inter-op parallelism, graphsched against oneTBB on the same kernels and graphs
# (benches/c/ops_common.h): builds ops_graphsched and ops_tbb (Release, into build-bench/), then
# runs the two in turn ROUNDS times at 2 threads and at 1, each process printing the median of
# its runs per configuration, and prints the median over rounds and the ratios. Installs
# libtbb-dev with apt-get if it is missing.
# Usage: benches/c/run_ops.sh   (env: ROUNDS=5, JOBS=1 build parallelism)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${ROUNDS:-5}"
source "$root/benches/c/bench_setup.sh"
cmake --build "$build" -j "$jobs" --target ops_graphsched ops_tbb >/dev/null

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for threads in 2 1; do
    "$build/benches/c/ops_tbb" "$threads" >> "$out"
    "$build/benches/c/ops_graphsched" "$threads" >> "$out"
  done
  echo "round $round of $rounds done" >&2
done

# Medians over rounds per (runtime, workload, mode, threads); then graphsched / oneTBB, and
# what each kind of parallelism gives graphsched's mix.
python3 - "$out" <<'PY'
import statistics, sys
runs, checks = {}, {}
for line in open(sys.argv[1]):
    who, work, mode, threads, ms, _, check = line.split()
    runs.setdefault((who, work, mode, threads), []).append(float(ms))
    checks.setdefault((work, mode), set()).add(check)
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"{'workload':8} {'mode':5} {'threads':>7} {'graphsched ms':>14} {'oneTBB ms':>10} {'ratio':>7}")
for (who, work, mode, threads), gs in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3])):
    if who != "graphsched":
        continue
    tbb = med.get(("tbb", work, mode, threads))
    ratio = f"{gs / tbb:6.2f}x" if tbb else "-"
    tbb_s = f"{tbb:10.2f}" if tbb else f"{'-':>10}"
    print(f"{work:8} {mode:5} {threads:>7} {gs:14.2f} {tbb_s} {ratio:>7}")
bad = [k for k, v in checks.items() if len(v) != 1]
print("checksums: " + ("graphsched and oneTBB agree on every workload" if not bad else f"DIFFER on {bad}"))
for who in ("graphsched", "tbb"):
    mix = {m: med.get((who, "mix", m, "2")) for m in ("inter", "intra", "both")}
    if all(mix.values()):
        print(f"{who} mix at 2 threads: both {mix['both']:.2f} ms, inter only {mix['inter']:.2f} "
              f"({mix['inter'] / mix['both']:.2f}x slower), intra only {mix['intra']:.2f} "
              f"({mix['intra'] / mix['both']:.2f}x slower)")
PY
