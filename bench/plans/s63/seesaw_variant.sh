#!/usr/bin/env bash
# A seesaw-kernel variant, PATCH (a file under bench/plans/, named from bench/plans/s54/: default
# ../s63/pv-order.patch), tested and timed against the checkout in one call:
#   1. build, then test_sm90_gpu whole (every 16-bit case on the seesaw among its kernels;
#      test_sm90_rising_scores moves references inside pairs) and the golden bundles on `cuda`
#      with the seesaw forced (MLAV_FLASH_FAMILY=sm90, MLAV_SM90_KERNEL=seesaw);
#   2. bench/ab.sh of the checkout against it, 3 rounds, BF16, page_size 64: B 16 at H {16, 64,
#      128} x q_len {2, 9, 16} x {32k, 131k} (the widest gaps to FlashMLA), then B 16 at H 8 and
#      B 1 at H {8, 128}, q_len 1 and 16 x {4k, 131k} (short blocks, memory-bound points);
#   3. memcheck, racecheck and synccheck of test_sm90_random and test_sm90_rising_scores (2 cases a
#      group).
#   CAP=560 bash bench/plans/s63/seesaw_variant.sh        (carry .debs; ~200-450 s on an H100)
# Session 62's form ran early-pb.patch (`git show 2958f85:bench/plans/s62/`), dropped.
# pv-order.patch: WG1 issues P_A V_A before P_B V_B (P_B made, stored and handed over first, as
# before), so that the tensor pipe runs a pair's products S_A, S_B, P_A V_A (WG0), P_A V_A (WG1),
# P_B V_B (WG1), P_B V_B (WG0), and stage 0's blocks 4..7 and P's slot (WG1's refill after its P_A
# V_A) go one P V product (~512 tensor cycles) earlier. Why: session 63's census (census.sh, H100,
# B 16, H 128, q_len 16, 131k) has each warpgroup's S issue taking 1,862 (WG0) and 2,091 (WG1)
# cycles of a 5,807-cycle pair, where S's own tensor work is ~1,152 at the pipe's peak; WG0's S_A
# meets stage 0's blocks 4..7 after its own 0..3, which WG1 refills only after its P_A V_A, the
# pair's second-last product, so the copy has ~1,000 tensor cycles of cover. Stage 1's blocks
# 4..7 (WG1's refill after its P_B V_B, now the second-last) keep the whole of S_A and S_B's own
# first blocks as cover. ptxas (nvcc 13.0): registers 238/252 against 234/254, no spills, no C7515,
# as many injected arrives (C7519). Predicted: 0.97-1.00x at B 16 where H x q_len >= 128 (the gain
# is what of S_A's issue waits on those blocks, at most ~512 cycles a pair); ~1.00x elsewhere.
PATCH=${PATCH:-../s63/pv-order.patch}
EXTRA_TARGETS="mlaverify_cli"
source bench/plans/s54/keys_steps.sh

sm90_tests() { # the whole of test_sm90_gpu, then the golden bundles on the forced seesaw
  timeout --kill-after=5 $(lim 200) $B/tests/test_sm90_gpu > $O/sm90.log 2>&1
  echo "test_sm90_gpu rc=$?"; grep -E "PASSED|FAILED|FAIL" $O/sm90.log | head -5
  MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw timeout $(lim 60) $B/mlaverify check \
    --backend cuda golden > $O/golden.log 2>&1
  echo "golden rc=$?"; tail -1 $O/golden.log
  el tests
  grep -q "FAILED" $O/sm90.log && { echo "tests failed: no A/B (the log says where)"; exit 1; }
}
ab16() { # $1 name, then bench args
  local n=$1; shift
  mkdir -p $O/ab-$n
  OUT=$O/ab-$n ROUNDS=3 timeout $(lim 200) bash bench/ab.sh /tmp/base --backend cuda "$@" \
    > $O/ab-$n.log 2>&1
  echo "ab $n rc=$?"; tail -24 $O/ab-$n/ab.txt 2>/dev/null || tail -20 $O/ab-$n.log
  el ab-$n
}
seesaw_sanitize() {
  local t f
  for t in memcheck racecheck synccheck; do
    for f in test_sm90_random test_sm90_rising_scores; do
      timeout --kill-after=5 $(lim 45) env MLAV_TEST_FILTER=$f MLAV_SM90_CASES=2 \
        compute-sanitizer --tool $t --error-exitcode 99 $B/tests/test_sm90_gpu \
        > $O/san-$t-$f.log 2>&1
      echo "$t $f rc=$?"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $O/san-$t-$f.log | sort | uniq -c
    done
  done
  el sanitizers
}

sm90_tests
ab16 wide --batch 16 --heads 16,64,128 --qlen 2,9,16 --prefix 32768,131072 --page-size 64
ab16 short16 --batch 16 --heads 8 --qlen 1,16 --prefix 4096,131072 --page-size 64
ab16 short1 --batch 1 --heads 8,128 --qlen 1,16 --prefix 4096,131072 --page-size 64
seesaw_sanitize
el done
