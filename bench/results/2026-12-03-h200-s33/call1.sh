#!/usr/bin/env bash
# session 33, call 1 (prepared in session 31, not run in session 32), from the checkout's root with .debs
# and .peer carried (.peer/flashmla: the peer harness with
# ../2026-12-02-h200-s30/flashmla/bench_flashmla-extension.patch applied):
#   COMMIT=<sha> bash bench/results/2026-12-03-h200-s33/call1.sh
# HEAD ac99055 (desc_at, eed3ce0's kernels): bench/diag/racecheck_epochs under racecheck (does the
# tool pair block barriers by each thread's count of barriers passed?); racecheck, synccheck,
# memcheck and initcheck on the seesaw kernel's random cases; FlashMLA beside mlaverify with the
# tree, page1 and fp8 variants; the GPU tests (default, _legal, _sm90 and _seesaw families) with
# what is left of the call.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 575 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el racecheck_epochs
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/racecheck_epochs bench/diag/racecheck_epochs.cu || echo "nvcc failed"
for e in "0 0" "1 1" "2 2" "1 0" "0 1" "2 1"; do
  compute-sanitizer --tool racecheck --error-exitcode 99 /tmp/racecheck_epochs $e > rc-epochs.log 2>&1
  echo "extra $e: rc=$? $(grep -m1 racecheck_epochs: rc-epochs.log | sed 's/.*wrong/wrong/') | $(grep -E 'RACECHECK SUMMARY' rc-epochs.log)"
  grep -m2 -A1 "Race reported" rc-epochs.log | sed 's/^/    /'
  cat rc-epochs.log >> rc-epochs-all.log
done
el sanitizers
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 && cmake --build build-t -j16 --target test_sm90_gpu >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
for tool in racecheck synccheck memcheck initcheck; do
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_*random' timeout 60 compute-sanitizer --tool $tool \
    --error-exitcode 99 build-t/tests/test_sm90_gpu > $tool.log 2>&1
  echo "$tool rc=$? ss runs: $(grep -c '^  ss ' $tool.log) ok: $(grep '^  ss ' $tool.log | grep -c ': ok') $(grep -E 'SUMMARY' $tool.log | tail -1)"
  grep -E "Race reported|Barrier error" $tool.log | sed 's/(const mlav_flash_params.*)+/(...)+/; s/(mlav_flash_params, CUtensorMap_st, int)//' | sort | uniq -c | head -6
done
el flashmla
COMMIT=${COMMIT:-unknown} FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=200 BENCH_ARGS="--variants=tree,page1,fp8" \
  OUT=$OUT/peer bash .peer/flashmla/run.sh . > $OUT/peer-run.log 2>&1; echo "flashmla rc=$?"
tail -25 $OUT/peer/summary.txt 2>/dev/null
el build
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j16 --target mlaverify test_cuda_gpu test_golden test_backends test_steps_gpu test_fp8 \
    test_sm90_gpu test_sm90_layouts_gpu test_kernel_rules >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
el built
el ctest
cd build-t
MLAV_TEST_STEPS=12 timeout $(lim 400) ctest --output-on-failure --timeout 200 \
  -R "^(test_cuda_gpu|test_golden|test_steps_gpu|test_sm90_gpu|test_sm90_layouts_gpu|test_kernel_rules|test_backends_|test_fp8)" > ../ctest.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed|\*\*\*" ../ctest.log | tail -12
cd ..
tar -czf $OUT/logs.tgz *.log $OUT/peer-run.log $(ls $OUT/peer/*.log 2>/dev/null) && rm -f $OUT/peer-run.log $OUT/peer/*.log
el done
