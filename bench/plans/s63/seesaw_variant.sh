#!/usr/bin/env bash
# A seesaw-kernel variant, PATCH (a file under bench/plans/, named from bench/plans/s54/, e.g.
# PATCH=../s63/x.patch), tested and timed against the checkout in one call:
#   1. build, then test_sm90_gpu whole (every 16-bit case on the seesaw among its kernels;
#      test_sm90_rising_scores moves references inside pairs), test_sm90_layouts_gpu (the TMA
#      boxes against the layout) and the golden bundles on `cuda` with the seesaw forced
#      (MLAV_FLASH_FAMILY=sm90, MLAV_SM90_KERNEL=seesaw), and test_steps_gpu on it (the engine
#      path's step instances); VARIANT_ENV (e.g. "MLAV_SM90_EARLY_S=1") adds to both;
#   2. bench/ab.sh of the checkout against it, 3 rounds, BF16, page_size 64: B 16 at H {16, 64,
#      128} x q_len {2, 9, 16} x {32k, 131k} (the widest gaps to FlashMLA), then B 16 at H 8 and
#      B 1 at H {8, 128}, q_len 1 and 16 x {4k, 131k} (short blocks, memory-bound points);
#   3. the BF16 instances' SASS of both builds (seesaw_sass: branches, reconvergence, TMA issues),
#      and the opcodes of every sm_90a object for bench/diag/sass_census.py's table;
#   4. memcheck, racecheck and synccheck of test_sm90_random and test_sm90_rising_scores (2 cases a
#      group).
#   PATCH=../s65/x.patch CAP=300 bash bench/plans/s63/seesaw_variant.sh  (carry .debs; ~190 s, H100)
# Session 62's early-pb.patch, session 63's pv-order.patch and session 65's defer-refill,
# refill-pred and refill-expect patches ran through it (all dropped; `git show
# 2958f85:bench/plans/s62/`, `git show 9a3c3a0:bench/plans/s63/`, `git show 026f42f:bench/plans/`).
: "${PATCH:?PATCH: a seesaw patch, named from bench/plans/s54/}"
EXTRA_TARGETS="mlaverify_cli test_sm90_layouts_gpu test_steps_gpu"
source bench/plans/s54/keys_steps.sh

sm90_tests() { # the whole of test_sm90_gpu, then the golden bundles on the forced seesaw
  timeout --kill-after=5 $(lim 200) $B/tests/test_sm90_gpu > $O/sm90.log 2>&1
  echo "test_sm90_gpu rc=$?"; grep -E "PASSED|FAILED|FAIL" $O/sm90.log | head -5
  timeout $(lim 60) $B/tests/test_sm90_layouts_gpu > $O/layouts.log 2>&1
  echo "test_sm90_layouts_gpu rc=$? PASS $(grep -o PASS $O/layouts.log | wc -l) FAIL" \
    "$(grep -o FAIL $O/layouts.log | wc -l)"
  env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw ${VARIANT_ENV:-} timeout $(lim 60) \
    $B/mlaverify check --backend cuda golden > $O/golden.log 2>&1
  echo "golden rc=$?"; tail -1 $O/golden.log
  env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw ${VARIANT_ENV:-} timeout --kill-after=5 \
    $(lim 90) $B/tests/test_steps_gpu > $O/steps.log 2>&1
  echo "test_steps_gpu rc=$?"; grep -E "PASSED|FAILED|FAIL" $O/steps.log | head -5
  el tests
  grep -q "FAILED" $O/sm90.log && { echo "tests failed: no A/B (the log says where)"; exit 1; }
  grep -q "FAIL" $O/layouts.log && { echo "layouts failed: no A/B (the log says where)"; exit 1; }
  grep -q "FAILED" $O/steps.log && { echo "steps failed: no A/B (the log says where)"; exit 1; }
}
seesaw_sanitize() {
  sanitize_groups "memcheck racecheck synccheck" test_sm90_random test_sm90_rising_scores
}

seesaw_sass() { # the BF16 seesaw instances' SASS of both A/B builds (bench/ab.sh's), and per
  # build the counts of the instructions a refill's layout shows in: branches, reconvergence,
  # warp syncs, TMA issues
  local d f o
  command -v cuobjdump > /dev/null || { echo "no cuobjdump"; return; }
  for d in build-ab-base-* build-ab-new; do
    f=$(find $d -name 'launch_sm90.cu.o' | head -1); [ -n "$f" ] || continue
    o=$O/sass-${d#build-ab-}.txt
    cuobjdump -sass $f | awk '/Function :/{on = ($0 ~ /seesaw/ && $0 ~ /bfloat16/)} on' > $o
    echo "$d: $(grep -c 'Function :' $o) functions," \
      "$(grep -cE '^ +/\*[0-9a-f]{4,}\*/' $o) instructions, BRA $(grep -c ' BRA ' $o)" \
      "BRA.U.ANY $(grep -c 'BRA.U.ANY' $o) BSSY $(grep -c 'BSSY' $o) BSYNC $(grep -c 'BSYNC' $o)" \
      "WARPSYNC $(grep -c 'WARPSYNC' $o) UTMALDG $(grep -c 'UTMALDG' $o)" \
      | tee -a $O/sass-summary.txt
    gzip -f $o
  done
  # every sm_90a object's opcodes for bench/diag/sass_census.py's table (the keys kernel's
  # HMMA and MOVM among them), read where cuobjdump is
  for f in $(find build-ab-new -path '*sm90*' -name '*.cu.o'); do cuobjdump -sass $f; done \
    > /tmp/sm90-all.sass 2> /dev/null
  python3 bench/diag/sass_census.py --table /tmp/sm90-all.sass > $O/sass-table.txt
  el sass
}

sm90_tests
ab_base wide --batch 16 --heads 16,64,128 --qlen 2,9,16 --prefix 32768,131072 --page-size 64
ab_base short16 --batch 16 --heads 8 --qlen 1,16 --prefix 4096,131072 --page-size 64
ab_base short1 --batch 1 --heads 8,128 --qlen 1,16 --prefix 4096,131072 --page-size 64
seesaw_sass
seesaw_sanitize
el done
