#!/usr/bin/env bash
# Session 54 (HEAD): a keys-kernel variant, PATCH (default s-chains2.patch, below; vf-early.patch,
# dropped in session 56 at 1.030x, at `git show e6944ab:bench/plans/s54/`).
# vf-early.patch: the keys kernel's K fragments transposed into V^T's as soon as
# each k16 step of S^T has made them (movmatrix in s_tile, not o_tile), so that V^T's operand
# quads are born where the MMA reads them and K's die with their step; a draft key's non-finite
# values zeroed on V^T's halves (keys 2 t4, 2 t4 + 1) instead of K's. Session 53's profile (B 16,
# H 16, q_len 1, 131k, page_size 64, H200) had 44 register moves among a tile's ~551 instructions
# a warp, with the kernel bound by its issue. Compiled here (nvcc 13.0, sm_90a; no disassembler
# here, so counted from the cubin's 16-byte instructions by their low 12 bits): the 16-row BF16
# instance 3,776 -> 3,752 instructions, opcode 0x224 (IMAD's register form, which IMAD.MOV is)
# 174 -> 146, 239-254 registers (240-249 before), no spills.
#   1. build, test_sm90_keys (its NaN-in-a-draft-row cases check the new zeroing);
#   2. the SASS of both trees' keys instances by opcode (cuobjdump);
#   3. bench/ab.sh HEAD against it, 3 rounds, FP8 cache, B 16, page_size 64 then 1;
#   4. memcheck, racecheck, synccheck (2 cases a group).
# Predicted: 0.95-0.98x the time at 8 and 16 rows (the moves ~5-8% of the issue, if ptxas leaves
# them out in the loop as in the static count), 1.00x at 32 rows (the seesaw).
# s-chains2.patch: S^T's k16 steps into two accumulators a n8 tile (even and odd steps: two MMA
# chains of 9 instead of one of 18), summed before the slices' exchange. Session 52's
# s-chains.patch failed test_sm90_keys because it added the odd steps' sum only into what it sent
# the other warp, not into its own scores; its A/B then gave 0.989 (page_size 64, before the bulk
# copies). Compiled here: the 16-row BF16 instance 3,776 -> 3,768 instructions (8 more FADD, 15
# fewer of opcode 0x224), 240-254 registers, no spills. Predicted 0.97-0.99x at 8 and 16 rows;
# session 56's A/B of it (H100, keys_ab.sh): 0.993x.
PATCH=${PATCH:-s-chains2.patch}
source bench/plans/s54/keys_steps.sh
keys_test
sass_counts
ab /tmp/base 64 p64
ab /tmp/base 1 p1
sanitize memcheck racecheck synccheck
el done
