#!/usr/bin/env bash
# session 10, device call 12: the GPU tests of the last commit (the many-splits cases changed),
# and racecheck + memcheck of the many-splits test
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call12
{ echo "# test_cuda_gpu"; timeout 200 $C/test_cuda_gpu 2>&1 | grep -E "^\[  |base seed|cases passed|FAIL|ERROR|error|ok cuda " | head -60
  echo "# racecheck, many splits"; MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool racecheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -2; echo "rc=$?"
  echo "# memcheck, many splits"; MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -2; echo "rc=$?"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
