#!/usr/bin/env bash
# The landed early-S order's GPU checks that session 76 had no device time for, on the checkout:
# compute-sanitizer memcheck, racecheck and synccheck of test_sm90_random and
# test_sm90_rising_scores (2 cases a group; every 16-bit case runs an early instance too, by its
# seed plain or evict_first), then test_steps_gpu whole with the seesaw and the early order forced
# (MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw MLAV_SM90_EARLY_S=1: the STEP instances).
#   CAP=300 bash bench/plans/s76/early_check.sh   (carry .debs; everything in $OUT/o.tgz)
EXTRA_TARGETS="test_steps_gpu"
source bench/plans/s54/keys_steps.sh
sanitize_groups "memcheck racecheck synccheck" test_sm90_random test_sm90_rising_scores
echo "early cases under the sanitizers: $(cat $O/san-*.log | grep -c ss-early)"
env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw MLAV_SM90_EARLY_S=1 timeout --kill-after=5 \
  $(lim 240) $B/tests/test_steps_gpu > $O/steps.log 2>&1
echo "test_steps_gpu rc=$?"; grep -E "PASSED|FAILED|FAIL" $O/steps.log | head -5
el done
