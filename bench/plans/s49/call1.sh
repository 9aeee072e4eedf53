#!/usr/bin/env bash
# Session 49 call 1 (HEAD): the keys kernel's first run on a GPU (src/cuda/sm90/keys.cuh, opted in by
# MLAV_SM90_KERNEL=keys): its own test against the fp64 oracle beside the other three kernels, the FP8
# tests that add it where a request has at most 16 rows, the golden bundles and test_fp8 with it opted in,
# then compute-sanitizer on a few of its cases.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
B=$PWD/build-s49
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $OUT/build.log 2>&1 \
  && cmake --build $B -j16 --target mlaverify mlaverify_cli test_sm90_gpu test_fp8 test_golden >> $OUT/build.log 2>&1
echo "build rc=$?"; el built
run() { # name seconds command...: its log in $OUT/name.log, its rc and last lines here
  local n=$1 s=$2; shift 2
  timeout --kill-after=5 $s "$@" > $OUT/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc"; grep -E "FAIL|PASSED|FAILED|SKIPPED|ERROR SUMMARY|rc=" $OUT/$n.log | head -8
}
run keys 150 env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu
grep -c "^  keys .*: ok" $OUT/keys.log
run fp8 150 env MLAV_TEST_FILTER='test_sm90_fp8_*' $B/tests/test_sm90_gpu
grep -c "^  keys .*: ok" $OUT/fp8.log
el tests
run golden 60 env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=keys $B/tests/test_golden
run test_fp8 90 env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=keys MLAV_TEST_FILTER='*(cuda)' $B/tests/test_fp8
el contract
for tool in memcheck racecheck synccheck initcheck; do
  run san-$tool 75 env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu
done
el done
