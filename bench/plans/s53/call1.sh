#!/usr/bin/env bash
# Session 53 call 1 (main): the keys kernel's shared-memory wavefronts (session 52's profile at
# page_size 64: 25.2 M of 68.0 M beyond the ideal at 16 rows; docs/PERFORMANCE.md#hopper).
#   1. main + wavefronts.patch (row-page.patch's one page id a row; whole tiles inside one page
#      copied flat; the slices' exchange 16 bytes a lane apart): build, test_sm90_keys, memcheck
#      and racecheck on it (2 cases a group: the row's other threads now read the id its first
#      thread copied, across the block barrier);
#   2. bench/ab.sh main against it, 3 rounds, FP8 cache, page_size 64 then 1, B 16, H {8, 16} x
#      q_len {1, 2} x {32k, 131k} (H 16, q_len 2 is the seesaw's: the control);
#   3. the same at page_size 64 with main + row-page.patch as the base (the flat tiles' and the
#      exchange's share);
#   4. Nsight Compute on the patched keys kernel at page_size 64, B 16, H 16, q_len 1, 131k: its
#      wavefronts and stalls against session 52's (68.0 M, 25.2 M excessive, 6.4 cycles an issue);
#   5. main's FP8 family rule at page_size 1 (B 1 and 16, H 8 and 16, q_len 1, 4k and 32k): the
#      keys kernel against the legal family (session 52 timed the rule's points at page_size 64).
# The shared steps are keys_steps.sh's: a failed test stops the call, each step is capped by
# what is left of CAP (570) s, the patch comes off at the end, everything lands in $OUT/o.tgz.
PATCH=wavefronts.patch EXTRA_TREES=rowpage
source bench/plans/s53/keys_steps.sh
(cd /tmp/rowpage && patch -p1 -s < bench/plans/s53/row-page.patch) || { echo "row-page failed"; exit 1; }
keys_test
ab /tmp/base 64 p64
ncu_h16
sanitize memcheck racecheck
ab /tmp/base 1 p1
ab /tmp/rowpage 64 flat-p64 # last: the profile attributes the wavefronts too
# the family rule at page_size 1 (its points were timed at page_size 64): main's keys kernel
# against the legal family's FP8 path (MLAV_SM90_KERNEL=seesaw turns the keys kernel off)
M0=$PWD/build-ab-base-base/mlaverify
for e in rule seesaw; do
  [ -x "$M0" ] && for b in 1 16; do
    MLAV_SM90_KERNEL=$e timeout $(lim 30) $M0 bench --backend cuda --batch $b --heads 8,16 --qlen 1 \
      --prefix 4096,32768 --page-size 1 --kv-dtype fp8 --reps 100 --max-seconds 1 2>&1 \
      | grep -E '^ +[0-9]+ ' | sed "s/^/$e B$b /" | tee -a $O/rule-p1.txt
  done
done
el rule-p1
el done
