#!/usr/bin/env bash
# l2-first-v2.patch (bench/plans/s54/, rebased onto the staged pages in session 56): the seesaw
# kernel's 16-bit KV copies with an L2 evict_first policy where a plan reads at most 256 MB of KV,
# the plain copies elsewhere. Session 56's harness run of it (base and patched in two processes,
# in turn) drifted more than the change: FlashMLA's own times 0.94-1.05x between them. Here
# bench/ab.sh alternates base and patched rounds in one call, under both L2 states the question
# turns on (`--l2 dirty`, the harness's zeroed 256 MB; `--l2 flush`, a read flush).
#   1. build test_sm90_gpu with the patch; test_sm90_random, _tma_tiles, _shares and
#      _extreme_magnitudes (the seesaw's BF16 paths, TMA and gathered); a failure ends the call;
#   2. bench/ab.sh HEAD against it, 3 rounds, BF16, page_size 64, H {8, 64} x q_len {1, 9}: B 16
#      at 4096 and 32k, then B 1 at 32k and 131k, under --l2 dirty; then both under --l2 flush.
# Predicted (session 52's H100 A/B of the hinted form and session 56's normalized harness run):
# B 16, 4096 0.93-0.97x and B 1 at 32k 0.95-0.98x up to 256 rows a request (KV <= 256 MB), 1.00x
# at B 16, 32k (604 MB: the plain copies, which the hinted form had made 1.02-1.05x).
# `CAP=570 bash bench/plans/s56/l2_ab.sh` (~450 s; carry .debs).
PATCH=l2-first-v2.patch
source bench/plans/s54/keys_steps.sh
l2_test() {
  local f n=0 bad=0
  for f in test_sm90_random test_sm90_tma_tiles test_sm90_shares test_sm90_extreme_magnitudes; do
    n=$((n + 1))
    timeout --kill-after=5 $(lim 90) env MLAV_TEST_FILTER="$f" $B/tests/test_sm90_gpu \
      > $O/t$n.log 2>&1
    echo "$f rc=$?"
    grep -q "FAILED\|FAIL " $O/t$n.log && bad=1
  done
  el tests
  [ $bad = 0 ] || { echo "a test failed: no A/B (the logs say where)"; exit 1; }
}
l2_ab() { # $1 L2 state, $2 batch, $3 prefixes, $4 seconds at most (the first builds both trees)
  local n=$1-b$2
  mkdir -p $O/ab-$n
  OUT=$O/ab-$n ROUNDS=3 timeout $(lim $4) bash bench/ab.sh /tmp/base --backend cuda \
    --kv-dtype same --page-size 64 --batch $2 --heads 8,64 --qlen 1,9 --prefix $3 \
    --l2 $1 > $O/ab-$n.log 2>&1
  echo "ab $n rc=$?"; cat $O/ab-$n/ab.txt 2>/dev/null || tail -20 $O/ab-$n.log
  el ab-$n
}
l2_test
l2_ab dirty 16 4096,32768 200
l2_ab dirty 1 32768,131072 80
l2_ab flush 16 4096,32768 80
l2_ab flush 1 32768,131072 80
el done
