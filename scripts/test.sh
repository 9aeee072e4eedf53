#!/usr/bin/env bash
# The test command: configure (CUDA built when nvcc is found), build, run every ctest (GPU tests
# skip themselves without a device). Exits non-zero on any failure.
#   ./scripts/test.sh [BUILD_DIR]      env: MLAV_CUDA=AUTO|ON|OFF, CUDA_ARCHS, JOBS
set -euo pipefail
source "$(dirname "$0")/common.sh"
build=${1:-build}
start=$(date +%s)
mlav_build "$build"
built=$(date +%s)
cd "$build"
ctest --output-on-failure
echo "test.sh: build $((built - start)) s, ctest $(( $(date +%s) - built )) s"
