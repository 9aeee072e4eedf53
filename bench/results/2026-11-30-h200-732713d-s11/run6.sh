#!/usr/bin/env bash
# session 11, device call 6: test_cuda_gpu with trees past 64 nodes (q_len 100 and 65: 4 and 3
# mask words) in the grid; 732713d's kernels.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call6
tar -xJf $C/bins.tar.xz -C $C
{ timeout 240 $C/test_cuda_gpu > /tmp/t.txt 2>&1; echo "rc=$?"
  grep -E "^\[  |base seed|cases passed|FAIL|ERROR|error|fail|q=100" /tmp/t.txt | head -40
  echo "# memcheck of the grid"; MLAV_TEST_FILTER=test_cuda_grid timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 $C/test_cuda_gpu > /tmp/m.txt 2>&1; echo "rc=$?"; grep -E "^\[  |SUMMARY" /tmp/m.txt
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
