#!/usr/bin/env bash
# Session 53 call 4 (main): the keys kernel's KV tiles by bulk copies (bulk.patch: wavefronts.patch
# with the tiles' cp.async copies replaced by cp.async.bulk on a barrier a stage: a tile inside
# one page one copy by thread 0, else a row's 576 bytes by its first thread, rows past kv_end
# zeroed by stores). Session 52's profile (page_size 64, B 16, H 16, q_len 1, 131k, H100): the
# copies 9.4 M of 68.0 M shared-memory wavefronts beyond the ideal, and the first reuse of their
# address registers 7.3% of the stall samples (a load/store unit that holds them).
#   1. build, test_sm90_keys, memcheck, racecheck and synccheck on it (2 cases a group);
#   2. bench/ab.sh main against it, 3 rounds, FP8 cache, page_size 64 then 1, B 16, H {8, 16} x
#      q_len {1, 2} x {32k, 131k} (H 16, q_len 2 is the seesaw's: the control);
#   3. Nsight Compute on it at page_size 64, B 16, H 16, q_len 1, 131k.
# Predicted: 0.85-0.93x the time at page_size 64 (0.78 -> 0.85-0.9 of the copy rate at 16 rows),
# 0.93-0.98x at page_size 1 (a copy a row: the row path), 1.00x at 32 rows.
# The shared steps are keys_steps.sh's: a failed test stops the call, each step is capped by
# what is left of CAP (570) s, the patch comes off at the end, everything lands in $OUT/o.tgz.
PATCH=bulk.patch
source bench/plans/s53/keys_steps.sh
keys_test
ab /tmp/base 64 p64
ncu_h16
sanitize memcheck racecheck synccheck
ab /tmp/base 1 p1
el done
