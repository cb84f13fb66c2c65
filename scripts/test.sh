#!/usr/bin/env bash
# Every test, on a fresh machine: Rust unit and integration tests (the header check among them),
# a real ONNX model run with ONNX Runtime's kernels and checked bit for bit (scripts/onnx.sh),
# then the CMake build and ctest (C/C++ examples against the shared and static library, the
# exported-symbol check, and the find_package, add_subdirectory and pkg-config consumers; the
# examples again under valgrind memcheck and built with ASan/UBSan: labels `valgrind`, `asan`).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
# clang: the headers are checked with both compilers (header_check_* in ctest).
ensure_packages cmake:cmake pkg-config:pkg-config valgrind:valgrind clang:clang

echo "== cargo test (the core, the workloads, the loom model, and the generated-header check)"
cargo test --locked --workspace --features graphsched/fault-injection

echo "== clippy: no warning, and every unsafe block states why it is sound"
cargo clippy --locked --workspace --all-targets --quiet -- -D warnings -D clippy::undocumented_unsafe_blocks

echo "== loom on the real code: the executor's sleep, a run's window and the memory budget's queue, in every interleaving up to 3 preemptions"
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test --locked --release --lib --quiet loom_

echo "== docs that cannot go stale: rustdoc with warnings as errors (broken intra-doc links), and rustfmt"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps --quiet
# The internals too: a module's docs name the items they rely on as links, so a rename that
# leaves them behind fails here.
RUSTDOCFLAGS="-D warnings" cargo doc --locked -p graphsched --no-deps --document-private-items --quiet
cargo fmt --all --check

echo "== ONNX: the classifier run by graphsched with ONNX Runtime's own kernels, bit for bit"
GS_ONNX_PROFILE=dev bash scripts/onnx.sh --self-test

echo "== cmake build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"

echo "== ctest"
ctest --test-dir build --output-on-failure
