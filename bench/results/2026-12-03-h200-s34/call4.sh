#!/usr/bin/env bash
# session 34, call 4, from the checkout's root at main 287f9f4 (equal shares landed) with .debs
# carried:
#   bash bench/results/2026-12-03-h200-s34/call4.sh
# The GPU tests whose plans for one problem may now take equal shares (the golden bundles, the
# cuda and sm_90a tests, FP8, the backends' cross-checks), three at a time.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j16 --target mlaverify test_cuda_gpu test_golden test_backends test_fp8 \
    test_sm90_gpu test_sm90_layouts_gpu test_kernel_rules >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
el built
cd build-t
timeout 250 ctest -j3 --output-on-failure --timeout 200 \
  -R "^(test_cuda_gpu|test_golden|test_sm90_gpu|test_sm90_layouts_gpu|test_kernel_rules|test_backends_|test_fp8)" > ../ctest.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed|\*\*\*|Not Run" ../ctest.log | tail -14
grep -E "Test +#" ../ctest.log | sed 's/ \+/ /g' | cut -c1-80
cd ..
cp ctest.log $OUT/
el done
