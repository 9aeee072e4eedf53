#!/usr/bin/env bash
# Session 43 call 5: an FP8 tile converted and multiplied a refill part at a time (s_issue_fp8;
# working tree k; b = k without it, bench/results/2026-12-04-h200-s43/fp8split.patch reversed: the prefetch of call 2 in both).
# k's FP8 tests and sanitizers (every FP8 case); an ncu of k's FP8 kernel.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
BUDGET=300 CONFIGS="fp8:3" TEST_TREES=k \
  TEST_TARGETS="test_sm90_gpu test_fp8 test_golden" \
  bash bench/ab_trees.sh b=-bench/results/2026-12-04-h200-s43/fp8split.patch k
el ab
MLAV_SM90_CASES=6 timeout $(lim 90) build-k/tests/test_sm90_gpu > k-sm90.log 2>&1
echo "k test_sm90_gpu rc=$? ss ok $(grep '^  ss ' k-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' k-sm90.log); $(grep -E 'PASSED|FAILED' k-sm90.log | tr '\n' ' ')"
(cd build-k && timeout $(lim 120) ctest --timeout 100 -R "^(test_fp8_seesaw|test_fp8_sm90|test_fp8|test_golden_seesaw|test_golden_sm90)$" > ../k-ctest.log 2>&1
 echo "k ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../k-ctest.log | head -20)
el tests

for tool in memcheck racecheck synccheck; do
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER="test_sm90_fp8_*" timeout $(lim 80) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-k/tests/test_sm90_gpu > k-$tool.log 2>&1; echo "$tool rc=$? $(grep -c ': ok' k-$tool.log) ok; $(grep SUMMARY k-$tool.log | tail -1)"
done
el sanitized
ncu --clock-control none -k regex:seesaw --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  build-k/mlaverify bench --backend cuda --batch 16 --heads 8 --qlen 1 --prefix 131072 --page-size 64 --kv-dtype fp8 \
  --reps 5 --min-reps 3 --max-seconds 0.2 > ncu-fp8-k5.txt 2>&1; echo "ncu rc=$?"
cp ncu-fp8-k5.txt $OUT/
tar -czf $OUT/logs.tgz build-ab-trees/*.log k-*.log
el done
