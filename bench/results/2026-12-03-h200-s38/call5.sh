#!/usr/bin/env bash
# Session 38, call 5 (main 82de8b2, .debs carried): where page_size 1 spends its time in the
# seesaw kernel. Nsight Compute's per-SASS-instruction warp-stall samples (SourceCounters,
# WarpStateStats) of the split kernel at B 1, H 128, q_len 16, 32k, chains, page 64 and page 1
# (seesaw forced), from a -lineinfo build.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/src-m && mkdir /tmp/src-m && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-m
cmake -S /tmp/src-m -B build-m -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo > build-m.log 2>&1 &&
  cmake --build build-m -j16 --target mlaverify_cli >> build-m.log 2>&1 || echo "build failed"
el built
for ps in 64 1; do
  MLAV_SM90_KERNEL=seesaw timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats \
    -k regex:'seesaw' --launch-skip 3 -c 1 -f -o /tmp/src$ps \
    build-m/mlaverify bench --backend cuda --batch 1 --heads 128 --qlen 16 --prefix 32768 --page-size $ps \
    --tree chain --reps 6 --min-reps 6 > ncu-src-$ps.log 2>&1
  echo "ncu page $ps rc=$?"
  ncu -i /tmp/src$ps.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $OUT/src-p$ps.csv.gz
  python3 bench/diag/ncu_summary.py $OUT/src-p$ps.csv.gz --top 40 > $OUT/summary-p$ps.txt 2>&1
  head -60 $OUT/summary-p$ps.txt
  el "page $ps"
done
tar -czf $OUT/logs.tgz build-m.log ncu-src-*.log
el done
