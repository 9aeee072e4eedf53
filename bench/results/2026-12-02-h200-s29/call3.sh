#!/usr/bin/env bash
# session 29, call 3, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s29/call3.sh
# The tree with the seesaw kernel as the rule's default: the GPU tests that hold both sm_90a
# kernels to the contract (test_cuda_gpu, test_golden, test_backends with their _legal, _sm90,
# _seesaw variants; test_steps_gpu with MLAV_TEST_STEPS=12 and its variants; test_sm90_gpu), and
# racecheck's report on the seesaw's epilogue: the row sums across named barrier 3 (BAR_SUM) in
# this build, across barrier 0 in a build with MLAV90_SS_SUM_BAR0=1, and the SASS around the
# reported offsets.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j12 --target mlaverify test_cuda_gpu test_golden test_backends test_steps_gpu test_sm90_gpu >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; } &
{ cmake -S . -B build-b0 $cfg -DCMAKE_CUDA_FLAGS="-DMLAV90_SS_SUM_BAR0=1" > build-b0.log 2>&1 &&
  cmake --build build-b0 -j4 --target test_sm90_gpu >> build-b0.log 2>&1; } ||
  { echo "build-b0 failed"; grep -m12 -E "error|Error" build-b0.log; } &
wait
el built
for n in b0 t; do
  el racecheck $n
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout $(lim 60) compute-sanitizer --tool racecheck \
    --error-exitcode 99 build-$n/tests/test_sm90_gpu > $OUT/racecheck-$n.log 2>&1
  echo "$n racecheck rc=$? ss runs: $(grep -c '^  ss ' $OUT/racecheck-$n.log) ok: $(grep '^  ss ' $OUT/racecheck-$n.log | grep -c ': ok')"
  grep -E "SUMMARY" $OUT/racecheck-$n.log | tail -1
done
# the SASS of the seesaw instances around racecheck's offsets (+0x17f00 .. +0x18100 and
# +0x18300 .. +0x18500)
cuobjdump -sass build-t/tests/test_sm90_gpu 2>/dev/null | awk '/Function : .*seesaw/{on=1; print; next} /Function :/{on=0} on && /\/\*17f[0-9a-f]0\*\/|\/\*180[0-9a-f]0\*\/|\/\*18[34][0-9a-f]0\*\//' > $OUT/sass-epilogue.txt
echo "sass lines: $(wc -l < $OUT/sass-epilogue.txt)"; grep -E "Function|BAR|STS|LDS" $OUT/sass-epilogue.txt | head -40
el ctest
cd build-t
MLAV_TEST_STEPS=12 timeout $(lim 420) ctest --output-on-failure --timeout 200 \
  -R "^(test_cuda_gpu|test_golden|test_steps_gpu|test_sm90_gpu|test_backends_)" > $OUT/ctest.log 2>&1
echo "ctest rc=$?"; grep -E "Test +#|tests passed|FAILED|Failed" $OUT/ctest.log | tail -30
cd ..
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log 2>/dev/null) && (cd $OUT && rm -f *.log)
el done
