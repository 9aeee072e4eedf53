#!/usr/bin/env bash
# Session 49 call 1 (HEAD): the keys kernel's first run on a GPU (src/cuda/sm90/keys.cuh, opted in by
# MLAV_SM90_KERNEL=keys), in order of value within the call's 600 s: its own test against the fp64 oracle
# beside the other three kernels, memcheck and racecheck on a few of its cases, the FP8 tests that add it
# where a request has at most 16 rows, the golden bundles and test_fp8 with it opted in, synccheck and
# initcheck. Each step's time is capped by what is left of 560 s.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
B=$PWD/build-s49
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $OUT/build.log 2>&1 \
  && cmake --build $B -j16 --target mlaverify mlaverify_cli test_sm90_gpu test_fp8 test_golden >> $OUT/build.log 2>&1
echo "build rc=$?"; el built
run() { # name seconds command...: its log in $OUT/name.log, its rc and last lines here
  local n=$1 s; s=$(lim $2); shift 2
  timeout --kill-after=5 $s "$@" > $OUT/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc (cap $s s)"; grep -E "FAIL|PASSED|FAILED|ERROR SUMMARY" $OUT/$n.log | head -8
  el $n
}
run keys 150 env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu
echo "keys runs ok: $(grep -c '^  keys .*: ok' $OUT/keys.log)"
for tool in memcheck racecheck; do
  run san-$tool 70 env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu
done
run fp8 100 env MLAV_TEST_FILTER='test_sm90_fp8_*' MLAV_SM90_CASES=8 $B/tests/test_sm90_gpu
echo "keys runs ok: $(grep -c '^  keys .*: ok' $OUT/fp8.log)"
run golden 40 env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=keys $B/tests/test_golden
run test_fp8 60 env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=keys MLAV_TEST_FILTER='*(cuda)' $B/tests/test_fp8
for tool in synccheck initcheck; do
  run san-$tool 40 env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=1 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu
done
el done
