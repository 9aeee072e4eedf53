#!/usr/bin/env bash
# Session 75's one call for early-s.patch (WG0's S_A a pair early where >= 8 row tiles read each
# KV row) and early-s-staged.patch (the same, and the FP8 cache's staged instance in that order
# always): both A/B'd against the checkout by bench/ab_trees.sh (the 40 B 16 shapes from 32k, the
# 120 page-64 shapes, the 120 FP8 ones; golden on each build with the early order forced), then
# test_sm90_gpu of the staged tree's build (the early kinds and the staged one among the others),
# all within CAP s (default 300).
#   CAP=300 bash bench/plans/s75/confirm.sh   (carry .debs)
t0=$(date +%s); cap=${CAP:-300}
CONFIGS="w16:3 p64:1 fp8:1" GOLDEN=1 TEST_TREES=stg TEST_TARGETS=test_sm90_gpu \
  GOLDEN_ENV="MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw MLAV_SM90_EARLY_S=1" \
  BUDGET=$(( cap * 65 / 100 )) bash bench/ab_trees.sh base early=bench/plans/s75/early-s.patch \
  stg=bench/plans/s75/early-s-staged.patch 2>&1 | grep -vE '^   +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ \|'
l=$(( cap - ($(date +%s) - t0) )); [ $l -gt 5 ] || l=5
timeout --kill-after=3 $l build-stg/tests/test_sm90_gpu > $OUT/sm90.log 2>&1
rc=$?
echo "test_sm90_gpu rc=$rc at $(( $(date +%s) - t0 )) s:" \
  "$(grep -c '^\[       OK' $OUT/sm90.log) OK, $(grep -c 'FAIL' $OUT/sm90.log) FAIL lines"
grep -E "PASSED|FAILED" $OUT/sm90.log | head -5
