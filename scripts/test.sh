#!/usr/bin/env bash
# The test command: install missing build dependencies (Debian/Ubuntu, as root), configure (CUDA built when nvcc is found), build, run every ctest (GPU tests
# skip themselves without a device). Exits non-zero on any failure.
#   ./scripts/test.sh [BUILD_DIR]      env: MLAV_CUDA=AUTO|ON|OFF, CUDA_ARCHS, JOBS
set -euo pipefail
source "$(dirname "$0")/common.sh"
build=${1:-build}
# as scripts/run.sh: install the missing Debian packages first (as root, where apt-get exists;
# otherwise mlav_install_deps names them and the build says what it lacks)
if [ -n "$(mlav_missing_packages)" ] && command -v apt-get > /dev/null; then
  mlav_install_deps || [ "$(id -u)" != 0 ]
fi
start=$(date +%s)
mlav_build "$build"
built=$(date +%s)
cd "$build"
ctest --output-on-failure
echo "test.sh: build $((built - start)) s, ctest $(( $(date +%s) - built )) s"
