#!/usr/bin/env bash
# Session 40, call 5 (main bb822f0, .debs and .peer carried; the harness with
# bench/results/2026-12-04-h200-s40/harness-order.patch): the landed tree's GPU tests and its
# mutant, then FlashMLA side by side. r = this tree: test_sm90_gpu (6 cases a test), ctest
# test_cuda_gpu, test_golden, test_backends, test_fp8 in every family variant (default,
# _legal, _sm90, _seesaw), test_kernel_rules, test_steps_gpu (ctest -j4: one GPU, no timing in
# them). m = r with the seesaw kernel's two guards removed (scale_ok always true, an FP8 factor
# of 0 kept 0): test_cuda_scale_signs and test_fp8's extremes, the seesaw forced, must fail.
# Then the peer harness (its builds made in the background at the start) at the 120 shapes
# with the tree, page1 and fp8 variants, --order abba, in what time is left.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 580 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=ON"
for v in r m; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
done
sed -i -e 's/    return scale_log2 > 0.0f;/    return scale_log2 == scale_log2;/' \
       -e 's/k = sf == 0.0f ? 0x1p-149f : sf;/k = sf;/' /tmp/src-m/src/cuda/sm90/seesaw.cuh
echo "mutant edits: $(grep -c 'return scale_log2 == scale_log2;\|            k = sf;' /tmp/src-m/src/cuda/sm90/seesaw.cuh) of 2"
rm -rf /tmp/peer && mkdir -p /tmp/peer
( COMMIT=bb822f0 FLASHMLA_PREBUILT_SPLITKV=1 PHASE=build OUT=/tmp/peer MAX_JOBS=4 bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/build.log 2>&1; echo "peer build rc=$?" ) &
peer=$!
( cmake -S /tmp/src-r -B build-r $cfg > build-r.log 2>&1 && cmake --build build-r -j8 --target test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8 test_steps_gpu test_kernel_rules >> build-r.log 2>&1 || echo "build-r failed" ) &
br=$!
( cmake -S /tmp/src-m -B build-m $cfg > build-m.log 2>&1 && cmake --build build-m -j4 --target test_cuda_gpu test_fp8 >> build-m.log 2>&1 || echo "build-m failed" ) &
bm=$!
wait $br $bm
el built
export MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw
MLAV_TEST_FILTER=test_cuda_scale_signs timeout $(lim 60) build-m/tests/test_cuda_gpu > m-signs.log 2>&1
echo "m test_cuda_scale_signs (seesaw forced) rc=$? (nonzero expected): $(grep -E 'PASSED|FAILED' m-signs.log | head -2 | tr '\n' ' ')"
grep -m2 -E "not NaN|rel|NaN" m-signs.log | cut -c1-200
MLAV_TEST_FILTER='*scale_extremes_gpu(cuda)' timeout $(lim 60) build-m/tests/test_fp8 > m-fp8.log 2>&1
echo "m test_fp8 extremes (seesaw forced) rc=$? (nonzero expected): $(grep -E 'PASSED|FAILED' m-fp8.log | head -2 | tr '\n' ' ')"
grep -m2 -E "not NaN|NaN|fail" m-fp8.log | cut -c1-200
unset MLAV_FLASH_FAMILY MLAV_SM90_KERNEL
MLAV_SM90_CASES=6 timeout $(lim 90) build-r/tests/test_sm90_gpu > r-sm90.log 2>&1
echo "r test_sm90_gpu rc=$? ss ok $(grep '^  ss ' r-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' r-sm90.log); $(grep -E 'PASSED|FAILED' r-sm90.log | tr '\n' ' ')"
el sm90
(cd build-r && timeout $(lim 260) ctest -j4 --timeout 250 -R "^(test_cuda_gpu|test_golden|test_backends|test_fp8)(_legal|_sm90|_seesaw)?$|^test_kernel_rules$|^test_steps_gpu$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed|Passed" ../r-ctest.log | head -30)
el ctest
wait $peer
left=$(( 575 - ($(date +%s) - t0) ))
if [ $left -gt 150 ]; then
  COMMIT=bb822f0 PHASE=bench TOTAL_BUDGET=$left BENCH_ARGS="--variants=tree,page1,fp8 --order abba --warmup-ms 150" \
    OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
  tail -3 /tmp/peer/summary.txt 2>/dev/null
else
  echo "no time left for the harness ($left s)"
fi
tar -czf $OUT/flashmla.tgz -C /tmp peer
tar -czf $OUT/logs.tgz build-*.log r-*.log m-*.log build-r/Testing/Temporary/LastTest.log 2>/dev/null
el done
