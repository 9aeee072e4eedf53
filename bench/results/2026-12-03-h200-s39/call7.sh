#!/usr/bin/env bash
# Session 39, call 7 (from the checkout root on main 400897e, the final tree; .debs carried): the
# GPU tests on the landed tree: test_sm90_gpu (6 cases a test) and ctest test_golden,
# test_cuda_gpu, test_backends, test_fp8 (each with the rule and with the seesaw forced) and
# test_kernel_rules.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=ON > build-f.log 2>&1 &&
  cmake --build build-f -j16 --target test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8 test_kernel_rules >> build-f.log 2>&1 || echo "build failed"
el built
MLAV_SM90_CASES=6 timeout 60 build-f/tests/test_sm90_gpu > f-sm90.log 2>&1; echo "test_sm90_gpu rc=$? $(grep -E 'PASSED|FAILED' f-sm90.log | tr '\n' ' ')"
(cd build-f && timeout 150 ctest --timeout 120 -R "^(test_golden|test_cuda_gpu|test_backends|test_fp8|test_kernel_rules)(_seesaw)?$" > ../f-ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed|\*\*\*|Test +#" ../f-ctest.log)
el done
cp f-sm90.log f-ctest.log $OUT/
