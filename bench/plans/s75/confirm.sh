#!/usr/bin/env bash
# Session 75's one call for early-s.patch (WG0's S_A a pair early where >= 8 row tiles read each
# KV row): the A/B of the checkout against it (bench/ab_trees.sh, the 40 B 16 shapes from 32k and
# the 120 page-64 shapes, golden on each build with the early order forced), then test_sm90_gpu
# on the patched build (its early kinds among the others), within CAP s (default 270).
#   CAP=270 bash bench/plans/s75/confirm.sh   (carry .debs)
t0=$(date +%s); cap=${CAP:-270}
left() { echo $(( cap - ($(date +%s) - t0) )); }
CONFIGS="w16:3 p64:2" GOLDEN=1 \
  GOLDEN_ENV="MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw MLAV_SM90_EARLY_S=1" \
  BUDGET=$(( cap * 45 / 100 )) bash bench/ab_trees.sh base early=bench/plans/s75/early-s.patch \
  2>&1 | grep -vE '^   +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ \|'
patch -p1 -s < bench/plans/s75/early-s.patch || { echo "patch failed"; exit 1; }
B=$PWD/build-t
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $OUT/tbuild.log 2>&1 &&
  timeout $(left) cmake --build $B -j16 --target test_sm90_gpu >> $OUT/tbuild.log 2>&1
echo "test build rc=$? at $(( $(date +%s) - t0 )) s"
l=$(left); [ $l -gt 5 ] || l=5
timeout --kill-after=3 $l $B/tests/test_sm90_gpu > $OUT/sm90.log 2>&1
echo "test_sm90_gpu rc=$? at $(( $(date +%s) - t0 )) s: $(grep -c '^\[       OK' $OUT/sm90.log) OK," \
  "$(grep -c 'FAIL' $OUT/sm90.log) FAIL lines, $(grep -c 'ss-early' $OUT/sm90.log) early lines"
grep -E "PASSED|FAILED" $OUT/sm90.log | head -5
patch -R -p1 -s < bench/plans/s75/early-s.patch
