#!/usr/bin/env bash
# Session 54 (HEAD): gathered.patch, the keys kernel's tiles that are not one whole page (page_size
# 1, tiles across pages, a split's last rows) by all threads' 16-byte cp.async again, as before
# 7b7e8d2, beside 7b7e8d2's one bulk copy for a whole-page tile. 7b7e8d2's bulk copies of 576
# bytes a row (64 a tile, by 64 threads) took 0.973-1.092x 3fc5103's time at page_size 1 (B 16;
# 1.012 geomean; B 1 1.012) while page_size 64 took 0.815-0.867x (session 53, H200).
#   1. build, test_sm90_keys, memcheck, racecheck and synccheck on it (2 cases a group);
#   2. bench/ab.sh HEAD against it, 3 rounds, FP8 cache, page_size 1 at B 16 and B 1, then
#      page_size 64 at B 16 (the control: whole-page tiles unchanged; H 16, q_len 2 is the
#      seesaw's everywhere).
# Predicted: page_size 1 0.93-0.99x HEAD's time (3fc5103's copies with one page id a row and the
# exchange's layout: 0.97-1.00x 3fc5103's); page_size 64 1.00x.
# The shared steps are keys_steps.sh's: a failed test stops the call, each step is capped by
# what is left of CAP (570) s, the patch comes off at the end, everything lands in $OUT/o.tgz.
PATCH=gathered.patch
source bench/plans/s54/keys_steps.sh
keys_test
ab /tmp/base 1 p1
sanitize memcheck racecheck synccheck
ab /tmp/base 1 b1-p1 1
ab /tmp/base 64 p64
el done
