#!/usr/bin/env bash
# A seesaw-kernel variant, PATCH (a file under bench/plans/, named from bench/plans/s54/: default
# ../s62/early-pb.patch), tested and timed against the checkout in one call:
#   1. build, then test_sm90_gpu whole (every 16-bit case on the seesaw among its kernels;
#      test_sm90_rising_scores moves references inside pairs) and the golden bundles on `cuda`
#      with the seesaw forced (MLAV_FLASH_FAMILY=sm90, MLAV_SM90_KERNEL=seesaw);
#   2. bench/ab.sh of the checkout against it, 3 rounds, BF16, page_size 64: B 16 at H {16, 64,
#      128} x q_len {2, 9, 16} x {32k, 131k} (the widest gaps to FlashMLA), then B 16 at H 8 and
#      B 1 at H {8, 128}, q_len 1 and 16 x {4k, 131k} (short blocks, memory-bound points);
#   3. memcheck, racecheck and synccheck of test_sm90_random and test_sm90_rising_scores (2 cases a
#      group).
#   CAP=560 bash bench/plans/s62/seesaw_variant.sh        (carry .debs; ~450 s on an H100)
# Session 60's form ran WG0's P_A from registers (dropped in session 61: `git show
# ac8bf20:bench/plans/s60/`).
# early-pb.patch: WG1 exponentiates P_B, packs it for its own P_B V_B and stores it for WG0's before
# its wait for WG0's reference (REF), at the reference its own tiles give (ms = next_ref of its
# running one and tile B's maxima; P's slot is free once S_B has completed). After the wait, where a
# row's pair reference M differs from ms (tile A moved it: an item's first pair, rare past it under
# the lazy rule), P_B is taken to M by one factor, exp2(ms - M), and packed and stored again. Why:
# session 59's profile (B 16, H 128, q_len 16, 131k, H100; `git show
# ce32f0a:bench/results/2026-12-06-h100-s59/profile/`) has WG1 stalled at REF's first try_wait (2.9%
# of the samples) and WG0 retrying its wait for P_B (PB) ~5.8 times in nearly every pair (12.2 M
# retries over 2.1 M waits; the retry loop unsampled), while the S products' block waits almost
# never retry (the tiles have landed). WG1's path from REF to P_B V_B's issue and PB loses its 32
# exponentials a thread (MUFU.EX2 at 4 a cycle an SMSP: ~256 cycles a warp), 16 packs and 4
# stmatrix, done while it waits for REF instead. ptxas (nvcc 13.0): no spills, no C7515, as many
# injected arrives (C7519) as the base; registers 236/254 against 234/254 (BF16, F16 instances), the
# FP8 ones unchanged, the staged ones 236/242 against 238/255. Where M = ms (the common case) P_B's
# bits are the base's. Predicted: 0.965-0.995x at B 16 where H x q_len >= 128, ~1.00x where
# memory-bound and at B 1, 4096. (A fuller form issued P_B V_B itself before REF and corrected O_R
# after it where A moved a reference; that correction's wgmma wait inside a branch made ptxas
# serialize every wgmma of the kernel, C7515, so it was not kept.)
PATCH=${PATCH:-../s62/early-pb.patch}
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
