#!/usr/bin/env bash
# The main job: build the library and the C examples, then run the pipeline example, which
# builds a graph of C kernels, runs it repeatedly on one pool and prints what happened.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_packages cmake:cmake
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target pipeline_shared >/dev/null
./build/c_examples/pipeline_shared
