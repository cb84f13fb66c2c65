#!/usr/bin/env bash
# Optional, not run by scripts/test.sh or CI: the concurrent Rust tests (tests/parallel.rs,
# tests/run.rs) under ThreadSanitizer. Needs a nightly toolchain with the rust-src component:
# -Zbuild-std rebuilds std with TSan so its atomics, locks and thread joins are seen too
# (crossbeam's build scripts notice the sanitizer and replace the fences TSan cannot model).
# Without nightly or rust-src it says what is missing and exits 0; it installs nothing.
# Usage: bash scripts/tsan.sh [test binary args, e.g. --test-threads=1 or a test name filter]
# A data race prints "WARNING: ThreadSanitizer: data race" and fails the test binary (exit 66).
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
    echo "tsan.sh: skipped, $*" >&2
    exit 0
}
target=x86_64-unknown-linux-gnu
[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || skip "only set up for $target"
command -v rustup >/dev/null 2>&1 ||
    skip "rustup not found (ThreadSanitizer needs a nightly toolchain with rust-src)"
rustup toolchain list | grep -q '^nightly' ||
    skip "no nightly toolchain; to enable: rustup toolchain install nightly --component rust-src"
rustup component list --installed --toolchain nightly 2>/dev/null | grep -q '^rust-src' ||
    skip "nightly has no rust-src; to enable: rustup component add rust-src --toolchain nightly"

echo "== cargo +nightly test under ThreadSanitizer (-Zbuild-std, target/tsan)"
# --target keeps RUSTFLAGS away from build scripts and proc macros; a separate target dir keeps
# the instrumented build from invalidating the normal one.
RUSTFLAGS="${RUSTFLAGS:-} -Zsanitizer=thread" \
    exec cargo +nightly test --locked -Zbuild-std --target "$target" --target-dir target/tsan \
    -p graphsched --test parallel --test run -- "$@"
