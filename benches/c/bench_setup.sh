# Sourced by the C benchmark scripts: installs libtbb-dev if it is missing (apt-get, with sudo
# when not root) and configures the Release benchmark build in $root/build-bench.
# Expects: root (the repository); BUILD overrides the build directory (default $root/build-bench).
# Sets: build, jobs; exports CARGO_BUILD_JOBS.
build="${BUILD:-$root/build-bench}"
jobs="${JOBS:-1}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-$jobs}"

if [ ! -f /usr/include/oneapi/tbb.h ] && ! dpkg -s libtbb-dev >/dev/null 2>&1; then
  echo "libtbb-dev missing: installing it with apt-get"
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update
  $sudo_cmd apt-get install -y libtbb-dev
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DGRAPHSCHED_BUILD_BENCHMARKS=ON -DGRAPHSCHED_BUILD_TESTS=OFF >/dev/null
