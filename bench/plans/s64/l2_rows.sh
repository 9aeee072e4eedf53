#!/usr/bin/env bash
# Does the L2 evict_first policy cost where many row tiles read each KV row? The seesaw's 16-bit
# copies take it where a plan reads at most 256 MB of KV (MLAV_SM90_L2_FIRST_BYTES): every B 1
# shape. Session 58's A/B of it timed H 8 and 64 at q_len 1 and 9 only; across the H200's two
# FlashMLA runs (728ef16, before it, and e584e39) B 1, 131k took 1.02-1.04x the time from 8 row
# tiles a request and 0.95-0.98x at 1-4 (docs/PERFORMANCE.md, "FlashMLA side by side"). Here
# l2-off.patch (no plan takes the policy) against the checkout, `bench/ab.sh`, 3 rounds, under the
# harness's flush (`--l2 dirty`): B 1 at H {64, 128} x q_len {4, 9, 16} x {32k, 131k} (4-32 row
# tiles), then B 16, 4096 at H {8, 64} x q_len {1, 9} as the control where the policy is known to
# gain (0.935-0.951x with it). new / base above 1 where the policy gains, below 1 where it costs.
# If B 1 from 8 row tiles comes out below ~0.99 in every round, the rule should also ask for few
# row tiles a request: PATCH=../s64/l2-rows.patch is that rule (the policy only where a request
# has at most 256 folded rows, 4 row tiles; test_kernel_rules' cases with it), timed the same way
# (predicted: as l2-off from 8 row tiles, 1.00 elsewhere).
#   CAP=330 bash bench/plans/s64/l2_rows.sh       (carry .debs; ~200 s)
PATCH=${PATCH:-../s64/l2-off.patch}
NO_TEST_BUILD=1
source bench/plans/s54/keys_steps.sh
ab_base b1-rows --l2 dirty --page-size 64 --batch 1 --heads 64,128 --qlen 4,9,16 \
  --prefix 32768,131072
ab_base b16-4096 --l2 dirty --page-size 64 --batch 16 --heads 8,64 --qlen 1,9 --prefix 4096
