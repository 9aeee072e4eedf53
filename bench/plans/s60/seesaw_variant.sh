#!/usr/bin/env bash
# Session 60's prepared call: a seesaw-kernel variant, PATCH (a file in bench/plans/s54/, so
# ../s60/NAME; default ../s60/wg0-rs.patch), tested and timed against the checkout in one call.
#   1. build, then test_sm90_gpu whole (every 16-bit case on the seesaw among its kernels;
#      test_sm90_rising_scores moves references inside pairs, the rewrite path below), and the
#      golden bundles on `cuda` with the seesaw forced (MLAV_FLASH_FAMILY=sm90,
#      MLAV_SM90_KERNEL=seesaw);
#   2. bench/ab.sh of the checkout against it, 3 rounds, BF16, page_size 64: B 16 at H {16, 64,
#      128} x q_len {2, 9, 16} x {32k, 131k} (the widest gaps to FlashMLA), then B 16 at H 8 and
#      B 1 at H {8, 128}, q_len 1 and 16 x {4k, 131k} (short blocks, memory-bound points);
#   3. memcheck, racecheck and synccheck of test_sm90_random and test_sm90_rising_scores (2 cases a
#      group).
#   PATCH=../s60/wg0-rs.patch CAP=560 bash bench/plans/s60/seesaw_variant.sh   (carry .debs)
# wg0-rs.patch: WG0 multiplies its own P_A from registers (register-A wgmma), as WG1 does P_B
# since a789f3a and as FlashMLA's two warpgroups do theirs. Taken off the path from S_A's
# completion to P_A V_A's issue: P_A's four stmatrix stores, a fence.proxy.async and a 128-thread
# barrier (the store for WG1 now follows the issue, packed again from the scores); off the path
# from M to PA, the barrier before P_A's rewrite (WG0's own product no longer reads the slot). The
# rewrite at the pair's reference, where a row's moved, is made from the packed registers after
# the wait: round(round(p) f1) where it was round(p f1), in those rows only. Session 37's form
# (`git show 37ff672:bench/results/2026-12-03-h200-s37/wg0-register-a.patch`) kept the 32 fp32
# scores live beside the 16 packed registers to the rewrite, spilled 24-28 bytes an instance and
# took 1.014x the time; this one compiles without spills (nvcc 13.0, sm_90a, -Xptxas -v: 245-254
# registers in every seesaw instance, 234-255 before). Predicted: 0.98-0.995x at B 16 where H x
# q_len >= 128 (tensor-bound: each pair's P_A V_A issued a fence and a barrier sooner), ~1.00x
# where memory-bound and at B 1, 4096.
PATCH=${PATCH:-../s60/wg0-rs.patch}
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
