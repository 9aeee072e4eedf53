#!/usr/bin/env bash
# The CPU suite under sanitizers (no CUDA: they see host code only). Any report fails its test.
#   ./scripts/sanitize.sh asan [REGEX]   gcc, MLAV_SANITIZE=address,undefined (leaks included),
#                                        into build-asan
#   ./scripts/sanitize.sh tsan [REGEX]   clang, MLAV_SANITIZE=thread, with Archer so that TSan
#                                        knows what OpenMP's barriers order, and tests/tsan.supp
#                                        (docs/RELIABILITY.md says why), into build-tsan
# Runs ctest -L cpu, or the tests matching REGEX.     env: SANITIZE_BUILD_DIR, JOBS
set -euo pipefail
source "$(dirname "$0")/common.sh"
mode=${1:?usage: sanitize.sh asan|tsan [REGEX]}
filter=(-L cpu)
[ $# -gt 1 ] && filter=(-R "$2")

case $mode in
asan)
  build=${SANITIZE_BUILD_DIR:-$mlav_root/build-asan}
  mlav_build_sanitized "$build" address,undefined
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  ;;
tsan)
  build=${SANITIZE_BUILD_DIR:-$mlav_root/build-tsan}
  command -v clang >/dev/null || { echo "sanitize.sh: clang not found (apt-get install clang libclang-rt-dev libomp-dev)" >&2; exit 1; }
  # Archer ships with clang's OpenMP runtime (libomp-dev), next to libomp.so
  archer=$(dirname "$(readlink -f "$(command -v clang)")")/../lib/libarcher.so
  [ -f "$archer" ] || { echo "sanitize.sh: $archer not found (apt-get install libomp-dev)" >&2; exit 1; }
  # (CMakeLists.txt turns off clang's -Wpass-failed: TSan's instrumentation keeps `omp simd`
  # loops from vectorizing, which clang would report as an error under -Werror)
  CC=clang mlav_build_sanitized "$build" thread
  export OMP_TOOL_LIBRARIES=$archer
  export TSAN_OPTIONS="suppressions=$mlav_root/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
  # test_install_consumer runs here too: this is CI's one clang build, and clang's libomp lives
  # outside the loader's default paths (the installed library and mlaverify.pc carry its path)
  ;;
*)
  echo "usage: sanitize.sh asan|tsan [REGEX]" >&2
  exit 2
  ;;
esac
cd "$build"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "${filter[@]}"
