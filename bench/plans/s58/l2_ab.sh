#!/usr/bin/env bash
# l2-first-v3.patch: the seesaw kernel's 16-bit KV copies under the L2 evict_first policy where a
# plan reads at most 256 MB of KV, as instances of their own (instances_l2first.cu) where v2
# (bench/plans/s54/) took the policy as a launch argument and branched on it: on an H100 (session
# 58) v2 took 0.91-0.93x the time at B 16, 4096 under --l2 dirty but 1.02-1.035x at H 64,
# q_len 9 under both L2 states, also at B 16, 32k where its copies were the plain ones.
#   1. build test_sm90_gpu and the backend's GPU tests with the patch; test_sm90_random,
#      _tma_tiles, _shares, _extreme_magnitudes (each 16-bit case also on the evict_first
#      instances), then ctest's _seesaw family (the backend's rule takes the evict_first instances
#      for these short problems: plans for one problem and for limits, graphs); a failure ends it;
#   2. bench/ab.sh HEAD against it, 3 rounds, BF16, H {8, 64} x q_len {1, 9}: page_size 64 at
#      B 16 (4096, 32k) and B 1 (32k, 131k) under --l2 dirty, then under --l2 flush; page_size 1
#      at B 16 under --l2 dirty.
# Predicted: under dirty 0.91-0.93x at B 16, 4096, q_len 1 and 0.95-0.97x at B 1 to 131k, 1.00x at
# B 16, 32k and at the tensor-bound points (v2's 1.02-1.035 gone); under flush 1.00x.
# `CAP=570 bash bench/plans/s58/l2_ab.sh` (~350-450 s; carry .debs).
PATCH=../s58/l2-first-v3.patch
EXTRA_TARGETS="test_cuda_gpu test_golden test_backends test_fp8 test_steps_gpu test_kernel_rules"
source bench/plans/s54/keys_steps.sh
l2_test() {
  local f n=0 bad=0
  for f in test_sm90_random test_sm90_tma_tiles test_sm90_shares test_sm90_extreme_magnitudes; do
    n=$((n + 1))
    timeout --kill-after=5 $(lim 90) env MLAV_TEST_FILTER="$f" $B/tests/test_sm90_gpu \
      > $O/t$n.log 2>&1
    echo "$f rc=$? ss-l2 runs ok: $(grep -c 'ss-l2.*ok' $O/t$n.log)"
    grep -q "FAILED\|FAIL " $O/t$n.log && bad=1
  done
  (cd $B && timeout --kill-after=5 $(lim 200) ctest -R '_seesaw$|test_kernel_rules' \
    --output-on-failure > $O/ctest.log 2>&1)
  echo "ctest rc=$?"; grep -E "tests passed|Failed|\*\*\*" $O/ctest.log | head -8
  grep -q "tests passed, 0 tests failed\|100% tests passed" $O/ctest.log || bad=1
  el tests
  [ $bad = 0 ] || { echo "a test failed: no A/B (the logs say where)"; exit 1; }
}
l2_ab() { # $1 L2 state, $2 batch, $3 prefixes, $4 seconds at most, $5 page size (64)
  local n=$1-b$2-p${5:-64}
  mkdir -p $O/ab-$n
  OUT=$O/ab-$n ROUNDS=3 timeout $(lim $4) bash bench/ab.sh /tmp/base --backend cuda \
    --kv-dtype same --page-size ${5:-64} --batch $2 --heads 8,64 --qlen 1,9 --prefix $3 \
    --l2 $1 > $O/ab-$n.log 2>&1
  echo "ab $n rc=$?"; tail -13 $O/ab-$n/ab.txt 2>/dev/null || tail -20 $O/ab-$n.log
  el ab-$n
}
l2_test
l2_ab dirty 16 4096,32768 200
l2_ab dirty 1 32768,131072 70
l2_ab flush 16 4096,32768 70
l2_ab flush 1 32768,131072 70
l2_ab dirty 16 4096 60 1
el done
