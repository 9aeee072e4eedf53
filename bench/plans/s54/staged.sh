#!/usr/bin/env bash
# staged.patch: an FP8 cache's pages staged as F16 in the workspace by one pass before the
# seesaw kernel, which then reads them as a 16-bit cache (TMA tiles, no conversion in shared
# memory), in plans for one problem whose KV rows 8 or more 64-row tiles read on average
# (MLAV_SM90_FP8_STAGED_MIN_ROW_TILES; MLAV_SM90_KERNEL=staged forces it). Session 53's table
# (3fc5103, H200) has the FP8 cache at 0.59-0.68x the BF16 cache's speed from 4 row tiles a
# request, B 1 from 32k and B 16 (B 1, H 128, q_len 16, 131k: 1,560 us against 965).
#   1. build (test_sm90_gpu, test_fp8, test_golden), then test_sm90_gpu's FP8 tests (every FP8
#      case also runs the staged kernel: KIND_STAGED), its NaN / bad-page / TMA-tile tests, and
#      ctest's test_fp8_staged and test_golden_staged (the backend with every FP8 plan for one
#      problem staged); a failure ends the call;
#   2. memcheck, racecheck, synccheck, initcheck on 2 FP8 random cases (the staged pass and
#      kernel among the others);
#   3. bench/ab.sh HEAD against it, 2 rounds, --kv-dtype same,fp8 (so each point's fp8_speedup is
#      FP8 / BF16 speed in one run), page_size 64: B 1, H {64, 128} x q_len {4, 9, 16} x {32k,
#      131k} (H 64, q_len 4: 4 row tiles, not staged: the control), then B 16, H 128, q_len 16,
#      {4k, 32k}.
# Predicted (the BF16 cache's time plus the pass at 3 bytes a KV element and 0.85 of the copy
# rate): FP8 / BF16 speed 0.92-0.94 at 32 row tiles (B 1, H 128, q_len 16, 131k: ~1,030 us, 0.66x
# the unstaged time; B 16, H 128, q_len 16, 4k and 32k: 0.94), 0.80-0.90 at 8-18 row tiles; 1.00x
# the time at the control (H 64, q_len 4); the BF16 rows 1.00x.
# Two calls (each capped at CAP, 570 s): `bash bench/plans/s54/staged.sh tests` (steps 1-2),
# then, if they passed, `bash bench/plans/s54/staged.sh ab` (step 3). The shared steps are
# keys_steps.sh's (EXTRA_TARGETS built beside test_sm90_gpu; the ab call, NO_TEST_BUILD, builds
# only its two trees' commands).
PART=${1:-tests}
PATCH=staged.patch
EXTRA_TARGETS="test_fp8 test_golden" NO_TEST_BUILD=
[ "$PART" = tests ] || NO_TEST_BUILD=1
source bench/plans/s54/keys_steps.sh
staged_test() {
  local f n=0 bad=0
  for f in 'test_sm90_fp8*' test_sm90_bad_page_ids test_sm90_nonfinite_hidden_draft \
      test_sm90_tma_tiles; do
    n=$((n + 1))
    timeout --kill-after=5 $(lim 100) env MLAV_TEST_FILTER="$f" $B/tests/test_sm90_gpu \
      > $O/t$n.log 2>&1
    echo "$f rc=$? staged runs ok: $(grep -c '^  stg .*: ok' $O/t$n.log)" \
      "failed: $(grep -c '^  stg .*FAIL' $O/t$n.log)"
    grep -q "FAILED\|FAIL " $O/t$n.log && bad=1
  done
  (cd $B && timeout --kill-after=5 $(lim 200) ctest -R '_staged$' --output-on-failure) \
    > $O/ctest-staged.log 2>&1
  local rc=$?
  echo "ctest staged rc=$rc"; grep -E "tests passed|Failed|Passed" $O/ctest-staged.log | tail -4
  [ $rc = 0 ] || bad=1
  el tests
  [ $bad = 0 ] || { echo "a staged test failed: no A/B (the logs say where)"; exit 1; }
}
staged_sanitize() {
  local tool
  for tool in memcheck racecheck synccheck initcheck; do
    timeout --kill-after=5 $(lim 60) env MLAV_TEST_FILTER=test_sm90_fp8_random MLAV_SM90_CASES=2 \
      compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu \
      > $O/san-$tool.log 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $O/san-$tool.log | sort | uniq -c
  done
  el sanitizers
}
staged_ab() { # $1 name, $2 seconds at most (the first builds both trees), then bench args
  local n=$1 cap=$2; shift 2
  mkdir -p $O/ab-$n
  OUT=$O/ab-$n ROUNDS=2 timeout $(lim $cap) bash bench/ab.sh /tmp/base --backend cuda \
    --kv-dtype same,fp8 --page-size 64 "$@" > $O/ab-$n.log 2>&1
  echo "ab $n rc=$?"; cat $O/ab-$n/ab.txt 2>/dev/null || tail -20 $O/ab-$n.log
  python3 - $O/ab-$n/ab-new.csv <<'PY' 2>/dev/null
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r.get('kv_dtype', '').startswith('fp8') and r.get('fp8_speedup'):
        print('  B %s H %s q %s %s: fp8/bf16 speed %s' % (r.get('batch'), r.get('heads'),
              r.get('q_len'), r.get('prefix'), r['fp8_speedup']))
PY
  el ab-$n
}
if [ "$PART" = tests ]; then
  staged_test
  staged_sanitize
else
  staged_ab b1 330 --batch 1 --heads 64,128 --qlen 4,9,16 --prefix 32768,131072
  staged_ab b16 200 --batch 16 --heads 128 --qlen 16 --prefix 4096,32768
fi
el done
