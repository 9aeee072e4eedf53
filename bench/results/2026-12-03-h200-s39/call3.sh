#!/usr/bin/env bash
# Session 39, call 3 (from the checkout root on main 9c8385f, .debs carried): where the feeder
# (call 1, feeder.patch) loses time at page_size 1. Nsight Compute's per-SASS-instruction
# warp-stall samples (SourceCounters, WarpStateStats) and duration (SpeedOfLight) of the split
# kernel at B 1, H 128, q_len 16, 32k, chains, page 1, seesaw forced, from -lineinfo builds of
# b = main and r = main + feeder.patch.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s39
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
for v in b r; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = r ] && { (cd /tmp/src-r && git apply "$OLDPWD/$R/feeder.patch") || echo "apply failed"; }
  ( cmake -S /tmp/src-$v -B build-$v -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
      -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target mlaverify_cli >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
for v in b r; do
  MLAV_SM90_KERNEL=seesaw timeout 150 ncu --clock-control none --section SpeedOfLight --section SourceCounters --section WarpStateStats \
    -k regex:'seesaw' --launch-skip 3 -c 1 -f -o /tmp/src-$v \
    build-$v/mlaverify bench --backend cuda --batch 1 --heads 128 --qlen 16 --prefix 32768 --page-size 1 \
    --tree chain --reps 6 --min-reps 6 > ncu-$v.log 2>&1
  echo "ncu $v rc=$?"
  ncu -i /tmp/src-$v.ncu-rep --page details --csv 2>&1 | grep -E '"Duration"|"Elapsed Cycles"|"Warp Cycles Per Issued Instruction"|"Executed Instructions"|"SM Busy"|"Compute \(SM\) Throughput"' | tee $OUT/details-$v.txt
  ncu -i /tmp/src-$v.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $OUT/src-$v.csv.gz
  python3 bench/diag/ncu_summary.py $OUT/src-$v.csv.gz --top 30 > $OUT/summary-$v.txt 2>&1
  head -50 $OUT/summary-$v.txt
  el "$v"
done
tar -czf $OUT/logs.tgz build-*.log ncu-*.log
el done
