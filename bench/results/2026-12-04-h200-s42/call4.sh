#!/usr/bin/env bash
# Session 42 call 4 (main 38ddfa1, .debs and .peer carried; the harness with
# harness-order.patch beside this script, applied to .peer/flashmla): FlashMLA side by side on the landed
# tree (its builds and ours first; the GPU quiet through the harness), the 120 shapes with the tree, page1 and
# fp8 variants, --order abba; then the landed tree's GPU tests not run in call 3 on this code:
# test_steps_gpu and test_steps_gpu_sm90 (ctest -j2), test_backends, test_fp8, test_cuda_gpu
# and test_golden in their _legal variants, test_sm90_gpu (6 cases a test).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
C=38ddfa1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=ON"
rm -rf /tmp/src-r && mkdir /tmp/src-r && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-r
rm -rf /tmp/peer && mkdir -p /tmp/peer
( COMMIT=$C FLASHMLA_PREBUILT_SPLITKV=1 PHASE=build OUT=/tmp/peer MAX_JOBS=8 bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/build.log 2>&1; echo "peer build rc=$?" ) &
peer=$!
( cmake -S /tmp/src-r -B build-r $cfg > build-r.log 2>&1 && cmake --build build-r -j8 --target test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8 test_steps_gpu >> build-r.log 2>&1 || echo "build-r failed" ) &
br=$!
wait $peer $br
el "built (peer and ours)"
left=$(( 330 - ($(date +%s) - t0) ))
COMMIT=$C PHASE=bench TOTAL_BUDGET=$left BENCH_ARGS="--variants=tree,page1,fp8 --order abba --warmup-ms 150" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
tail -3 /tmp/peer/summary.txt 2>/dev/null; grep -E "copy ceiling|matmul" /tmp/peer/bench.log | head -3
tar -czf $OUT/flashmla.tgz -C /tmp peer
el harness
MLAV_SM90_CASES=6 timeout $(lim 90) build-r/tests/test_sm90_gpu > r-sm90.log 2>&1
echo "r test_sm90_gpu rc=$? ss ok $(grep '^  ss ' r-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' r-sm90.log); $(grep -E 'PASSED|FAILED' r-sm90.log | tr '\n' ' ')"
(cd build-r && timeout $(lim 260) ctest -j2 --timeout 250 -R "^test_steps_gpu(_sm90)?$|^(test_backends|test_fp8)$|^(test_cuda_gpu|test_golden)_legal$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed|Passed" ../r-ctest.log | head -20)
tar -czf $OUT/logs.tgz build-*.log r-*.log build-r/Testing/Temporary/LastTest.log 2>/dev/null
el done
