#!/usr/bin/env bash
# session 30, call 5, from the checkout's root with .debs and .peer carried (.peer/flashmla: the
# peer harness with flashmla/bench_flashmla-extension.patch of this folder applied):
#   COMMIT=<sha> bash bench/results/2026-12-02-h200-s30/call5.sh
# The final tree (the seesaw kernel for every page size and for FP8 caches): compute-sanitizer's
# four tools on the seesaw kernel's random cases (page_size 1 and 64, both caches), the GPU
# tests with their _legal, _sm90 and _seesaw variants, then FlashMLA beside mlaverify with the
# tree, page1 and fp8 variants.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 575 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j16 --target mlaverify test_cuda_gpu test_golden test_backends test_steps_gpu test_fp8 \
    test_sm90_gpu test_sm90_layouts_gpu test_kernel_rules >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
for tool in memcheck racecheck synccheck initcheck; do
  el $tool
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_*random' timeout $(lim 60) compute-sanitizer --tool $tool \
    --error-exitcode 99 build-t/tests/test_sm90_gpu > $OUT/$tool.log 2>&1
  echo "$tool rc=$? ss runs: $(grep -c '^  ss ' $OUT/$tool.log) ok: $(grep '^  ss ' $OUT/$tool.log | grep -c ': ok') $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1)"
done
el ctest
cd build-t
MLAV_TEST_STEPS=12 timeout $(lim 240) ctest --output-on-failure --timeout 200 \
  -R "^(test_cuda_gpu|test_golden|test_steps_gpu|test_sm90_gpu|test_sm90_layouts_gpu|test_kernel_rules|test_backends_|test_fp8)" > $OUT/ctest.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed|\*\*\*" $OUT/ctest.log | tail -12
cd ..
el flashmla
COMMIT=${COMMIT:-unknown} FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=$(lim 200) BENCH_ARGS="--variants=tree,page1,fp8" \
  OUT=$OUT/peer bash .peer/flashmla/run.sh . > $OUT/peer-run.log 2>&1; echo "flashmla rc=$?"
tail -25 $OUT/peer/summary.txt 2>/dev/null
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log peer/*.log peer/*.txt 2>/dev/null | grep -v summary.txt) &&
  (cd $OUT && rm -f *.log peer/*.log $(ls peer/*.txt | grep -v summary.txt))
ls -R $OUT | head -20
el done
