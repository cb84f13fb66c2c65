"""graphsched (auto) against ONNX Runtime's two configurations, one process a row, in turns.

A single `scripts/onnx.sh` run measures each configuration once, and on this machine a row moves
by 2-4% from one process to the next. This runs the three rows (`gsched-onnx DIR --child
gs-auto | ort-sequential | ort-parallel`) ROUNDS times, rotating their order each round, and
prints each round's ratio of graphsched's median inference to ONNX Runtime's faster one, with
peak RSS and growth against that same configuration, then the medians of the rounds.

Usage: paired_rounds.py GSCHED_ONNX ORT_LIBRARY PREPARED_DIR THREADS RUNS ROUNDS
(PREPARED_DIR is what `scripts/onnx.sh MODEL` prepared and partitioned, under
target/onnx/prepared/.)
"""

import json
import statistics
import subprocess
import sys

MIB = 1 << 20


def row(exe, library, prepared, threads, runs, child):
    done = subprocess.run([exe, prepared, "--ort-library", library, "--threads", threads, "--runs", runs,
                           "--child", child], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"paired_rounds.py: {child} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    exe, library, prepared, threads, runs, rounds = sys.argv[1:]
    children = ["gs-auto", "ort-sequential", "ort-parallel"]
    ratios, peaks, growths = [], [], []
    for r in range(int(rounds)):
        order = children[r % 3:] + children[:r % 3]
        rows = {c: row(exe, library, prepared, threads, runs, c) for c in order}
        auto = rows["gs-auto"]
        best = min(rows["ort-sequential"], rows["ort-parallel"], key=lambda x: x["wall_ns"])
        ratios.append(auto["wall_ns"] / best["wall_ns"])
        peaks.append(auto["peak_rss_bytes"] / best["peak_rss_bytes"])
        growths.append(auto["rss_growth_bytes"] / max(best["rss_growth_bytes"], 1))
        print(f"round {r}: auto {auto['wall_ns'] / 1e3:.1f} us, {best['config']} {best['wall_ns'] / 1e3:.1f} us "
              f"-> {ratios[-1]:.3f}x; peak RSS {auto['peak_rss_bytes'] / MIB:.1f} / {best['peak_rss_bytes'] / MIB:.1f} MiB, "
              f"growth {auto['rss_growth_bytes'] / MIB:.2f} / {best['rss_growth_bytes'] / MIB:.2f} MiB", flush=True)
    print(f"median {statistics.median(ratios):.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f}); "
          f"peak RSS {statistics.median(peaks):.3f}x; growth {statistics.median(growths):.2f}x")


if __name__ == "__main__":
    main()
