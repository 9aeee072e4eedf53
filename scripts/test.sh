#!/usr/bin/env bash
# The test command: install missing build dependencies (Debian/Ubuntu, as root), configure (CUDA built when nvcc is found), build, run every ctest (GPU tests
# skip themselves without a device). Exits non-zero on any failure.
#   ./scripts/test.sh [BUILD_DIR]      env: MLAV_CUDA=AUTO|ON|OFF, CUDA_ARCHS, JOBS (the build's
#                                      and ctest's parallel jobs; nproc)
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
# the tests labelled gpu one at a time (each may take much of the device's memory), the others
# JOBS at a time; a test that runs cmake on the build tree holds RESOURCE_LOCK build_tree
ctest --output-on-failure -j "${JOBS:-$(nproc)}" -LE gpu
ctest --output-on-failure -L gpu --no-tests=ignore
echo "test.sh: build $((built - start)) s, ctest $(( $(date +%s) - built )) s"
