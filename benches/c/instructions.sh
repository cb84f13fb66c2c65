#!/usr/bin/env bash
# Instructions per node of graphsched and oneTBB on the workloads of benches/c/run_overhead.sh,
# counted by valgrind's callgrind: the same for every run, where times on a shared machine
# drift by 2x. Counts only the timed runs (oh_timed_runs), not construction or the warm-up.
# One thread (callgrind runs threads one at a time); graphsched both without an executor (seq)
# and with one of 1 thread, its estimates frozen after the warm-up (OH_FREEZE=1: under valgrind
# kernels look 50x slower, the estimates would move and every run recompute its priorities; the
# 1-in-64 timing of cheap kernels is then not counted, a few instructions a node). Under
# valgrind the pool's hooks for the memory checkers are active; the count without them (their
# out-of-line bodies left out) is what runs natively. Instructions are not time (a locked
# instruction or a cache miss costs tens of plain ones): use it to see what a change does to a
# path's length, and benches/c/run_overhead.sh or compare_overhead.sh for time.
# Usage: benches/c/instructions.sh [WORKLOAD...]   (default: all five; needs valgrind)
# PLANNED=1 adds graphsched's runs on the graph's own static plan (GS_RUN_AUTO_PLAN).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD:-$root/build-bench}"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install -y valgrind)"; exit 1; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DGRAPHSCHED_BUILD_BENCHMARKS=ON -DGRAPHSCHED_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-1}" --target overhead_graphsched >/dev/null
have_tbb=0
if cmake --build "$build" -j "${JOBS:-1}" --target overhead_tbb >/dev/null 2>&1; then have_tbb=1; fi

workloads=("$@")
[ ${#workloads[@]} -eq 0 ] && workloads=(chain fanout tree layered single pair)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

# The instructions a callgrind profile spent in the checkers' hooks: the calls into their
# out-of-line bodies (`*_watched`), from anywhere but each other.
read -r -d '' hooks_py <<'PY' || true
import re, sys
names, fn, cfn, total, pending = {}, "", "", 0, False
def name(spec):
    m = re.match(r"\((\d+)\)(?: (.*))?", spec)
    if m.group(2):
        names[m.group(1)] = m.group(2)
    return names[m.group(1)]
for line in open(sys.argv[1]):
    if line.startswith("fn="):
        fn = name(line[3:].strip())
    elif line.startswith("cfn="):
        cfn = name(line[4:].strip())
    elif line.startswith("calls="):
        pending = True
    elif pending:
        pending = False
        if cfn.endswith("_watched") and not fn.endswith("_watched"):
            total += int(line.split()[-1])
print(total)
PY

# The locked instructions a profile made with --dump-instr=yes executed (lock-prefixed ones, and
# xchg with a memory operand, which locks): each costs tens of plain instructions, more when
# another core holds the line, and counting instructions hides them. Their addresses come from
# objdump.
read -r -d '' atomics_py <<'PY' || true
import re, subprocess, sys
names, counts = {}, {}
obj, last, after_call = None, 0, False
for line in open(sys.argv[1]):
    if line.startswith(("ob=", "cob=")):
        m = re.match(r"c?ob=(?:\((\d+)\))? ?(.*)", line.strip())
        if m.group(2):
            names[m.group(1)] = m.group(2)
        if line.startswith("ob="):
            obj = names[m.group(1)]
    elif line.startswith("calls="):
        after_call = True
    elif line[:1] in "0123456789+-*":
        field = line.split()[0]
        addr = {"+": lambda: last + int(field[1:]), "-": lambda: last - int(field[1:]),
                "*": lambda: last}.get(field[0], lambda: int(field, 0))()
        if after_call:          # a call's inclusive cost, not the instruction's own count
            after_call = False  # (nor a position the next lines count from)
        elif len(line.split()) > 2:
            last = addr
            counts[(obj, addr)] = counts.get((obj, addr), 0) + int(line.split()[2])
total = 0
for o in {o for o, _ in counts}:
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", o], capture_output=True, text=True).stdout
    # xchg locks only with a memory operand (`xchg %ax,%ax` is a two-byte no-op).
    for m in re.finditer(r"^\s*([0-9a-f]+):\s+(lock |xchg\s+[^\n]*\()", dis, re.M):
        total += counts.get((o, int(m.group(1), 16)), 0)
print(total)
PY

# count NAME ENV... -- PROGRAM WORKLOAD: prints NAME, the workload and instructions per node.
count() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local prog=$1 w=$2
  local line
  line="$(env "${envs[@]}" "$prog" "$w")"   # the workload's name, node count and runs
  env "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=yes \
      --toggle-collect='*oh_timed_runs*' "$prog" "$w" >/dev/null 2>&1
  local total hooks atomics
  total="$(awk '/^summary:/ {print $2}' "$out")"
  # What the memory checkers' hooks cost (`src/pool/sanitize.rs`: under valgrind they are active,
  # natively each is one load and a branch): the calls into their out-of-line bodies, `*_watched`.
  hooks="$(python3 -c "$hooks_py" "$out")"
  atomics="$(python3 -c "$atomics_py" "$out")"
  # The program prints: SYSTEM NAME VALUE UNIT (NODES nodes, median of REPS); runs per rep
  # follow from the unit (us/run: 1000 or 10000 runs of a small graph).
  echo "$line" | awk -v total="$total" -v hooks="$hooks" -v atomics="$atomics" -v name="$name" '{
    nodes = substr($5, 2) + 0
    runs = ($4 == "us/run") ? (($2 ~ /_x10k/) ? 10000 : 1000) : 1
    printf "%-14s %-16s %10.0f instructions/node", name, $2, total / (5 * runs * nodes)
    if (hooks > 0) printf " (%.0f without the checker hooks)", (total - hooks) / (5 * runs * nodes)
    printf ", %.2f locked\n", atomics / (5 * runs * nodes)
  }'
}

for w in "${workloads[@]}"; do
  count "graphsched-seq" OH_SEQUENTIAL=1 OH_FREEZE=1 -- "$build/benches/c/overhead_graphsched" "$w"
  count "graphsched-1" OH_THREADS=1 OH_FREEZE=1 -- "$build/benches/c/overhead_graphsched" "$w"
  if [ "${PLANNED:-0}" = 1 ]; then   # runs on the graph's own plan (GS_RUN_AUTO_PLAN)
    count "gs-seq-plan" OH_SEQUENTIAL=1 OH_FREEZE=1 OH_AUTO_PLAN=1 -- "$build/benches/c/overhead_graphsched" "$w"
    count "gs-1-plan" OH_THREADS=1 OH_FREEZE=1 OH_AUTO_PLAN=1 -- "$build/benches/c/overhead_graphsched" "$w"
  fi
  if [ "$have_tbb" -eq 1 ]; then
    count "tbb-1" OH_THREADS=1 -- "$build/benches/c/overhead_tbb" "$w"
  fi
done
