#!/usr/bin/env bash
# Session 75's one call for its three seesaw variants against the checkout (bench/ab_trees.sh:
# the 40 B 16 shapes from 32k three times, the 120 page-64 shapes and the 120 FP8 ones once;
# golden on each build with the early order forced where a switch forces it), then test_sm90_gpu
# of the two test builds, all within CAP s (default 340):
#   early  early-s.patch: WG0's S_A a pair early where >= 8 row tiles read each KV row (a rule)
#   stg    early-s-staged.patch: the same, and the FP8 cache's staged instance always so
#   vote   early-vote.patch: a 16-bit cache's S_A a pair early wherever its first four blocks
#          have landed by then (a vote of the warpgroup each pair), no rule
#   CAP=340 bash bench/plans/s75/confirm.sh   (carry .debs)
t0=$(date +%s); cap=${CAP:-340}
CONFIGS="w16:3 p64:1 fp8:1" GOLDEN=1 TEST_TREES="stg vote" TEST_TARGETS=test_sm90_gpu \
  GOLDEN_ENV="MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw MLAV_SM90_EARLY_S=1" \
  BUDGET=$(( cap * 70 / 100 )) bash bench/ab_trees.sh base early=bench/plans/s75/early-s.patch \
  stg=bench/plans/s75/early-s-staged.patch vote=bench/plans/s75/early-vote.patch 2>&1 |
  grep -vE '^   +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ \|'
for name in stg vote; do
  l=$(( cap - ($(date +%s) - t0) )) # stg half of what is left, vote the rest
  [ "$name" = vote ] || l=$(( l / 2 ))
  [ $l -gt 5 ] || l=5
  timeout --kill-after=3 $l build-$name/tests/test_sm90_gpu > $OUT/sm90-$name.log 2>&1
  rc=$?
  log=$OUT/sm90-$name.log
  echo "test_sm90_gpu ($name) rc=$rc at $(( $(date +%s) - t0 )) s:" \
    "$(grep -c '^\[       OK' $log) OK, $(grep -c 'FAIL' $log) FAIL lines"
  grep -E "PASSED|FAILED" $log | head -3
done
