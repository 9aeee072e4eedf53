#!/usr/bin/env bash
# Session 36, call 5 (from the checkout's root on branch s36-rs, .debs and .peer carried): the
# landed tree a789f3a (call 4's register-A P_B, hand-over S1 removed from the enum and the comments;
# its seesaw SASS 6,670 of 6,680 instructions in order with 7b310cd's). Its GPU tests with the
# default and the seesaw family, then FlashMLA beside it (120 shapes, tree, page1, fp8).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/src-f && mkdir /tmp/src-f && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-f
cmake -S /tmp/src-f -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > build-f.log 2>&1 &&
  cmake --build build-f -j16 --target mlaverify_cli test_sm90_gpu test_sm90_layouts_gpu test_golden test_cuda_gpu test_backends test_fp8 test_tree >> build-f.log 2>&1 || echo "build failed"
el built
MLAV_SM90_CASES=6 timeout $(lim 60) build-f/tests/test_sm90_gpu > f-sm90.log 2>&1
echo "test_sm90_gpu rc=$? ss ok $(grep '^  ss ' f-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' f-sm90.log); $(grep -E 'PASSED|FAILED' f-sm90.log | tr '\n' ' ')"
(cd build-f && timeout $(lim 150) ctest --timeout 100 -R "^(test_sm90_layouts_gpu|test_golden|test_golden_seesaw|test_golden_sm90|test_cuda_gpu|test_cuda_gpu_seesaw|test_cuda_gpu_sm90|test_backends_seesaw|test_fp8_seesaw|test_fp8_sm90|test_tree)$" > ../f-ctest.log 2>&1
 echo "ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../f-ctest.log | head)
el tested
rm -rf /tmp/peer && mkdir -p /tmp/peer
COMMIT=a789f3a FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=$(lim 240) BENCH_ARGS="--variants=tree,page1,fp8" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-f > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
tail -2 /tmp/peer/summary.txt 2>/dev/null
tar -czf $OUT/flashmla.tgz -C /tmp peer
tar -czf $OUT/logs.tgz build-f.log f-*.log
el done
