#!/usr/bin/env bash
# session 31, call 1 (prepared in session 30 as s30/NEXT-profile.sh, run at a7a833d), from the
# checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s31/call1.sh
# Nsight Compute's stall samples per SASS instruction on the seesaw kernel where session 30 left
# it short of its targets, so that the next change is chosen from a profile:
#   p1: the FP8 cache at B 16, H 8, q_len 1, 131072 (0.70x the BF16 cache's speed; DRAM 31%):
#       how much of a tile's time the owner's conversion (fp8_tile_ready) holds;
#   p2: BF16 page_size 1 at the same point (1.15-1.19x page 64's time): the cp.async gather's
#       issue in the math warpgroups against the waits;
#   p3: BF16 page 64 at B 1, H 128, q_len 16, 131072 (0.74 of the matmul rate in the peer
#       harness, FlashMLA 0.86).
# Files (at most 8 come back): ncu-details-{1,2,3}.txt, src-{1,2,3}.csv.gz, logs.tgz.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cmake -S . -B build -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF > build.log 2>&1 && cmake --build build -j16 --target mlaverify_cli >> build.log 2>&1 ||
  { grep -m10 -E "error|Error" build.log; exit 1; }
n=0
for pt in "--batch 16 --heads 8 --qlen 1 --prefix 131072 --kv-dtype fp8 --page-size 64" \
          "--batch 16 --heads 8 --qlen 1 --prefix 131072 --page-size 1" \
          "--batch 1 --heads 128 --qlen 16 --prefix 131072 --page-size 64"; do
  n=$((n + 1)); el "ncu $n: $pt"
  timeout 150 ncu --clock-control none --section SpeedOfLight --section SourceCounters \
    --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:seesaw --launch-skip 2 -c 1 -f \
    -o $OUT/p$n build/mlaverify bench $pt --reps 6 --min-reps 6 --backend cuda > $OUT/ncu-run-$n.log 2>&1
  echo "ncu rc=$?"
  ncu -i $OUT/p$n.ncu-rep --page details > $OUT/ncu-details-$n.txt 2>&1
  ncu -i $OUT/p$n.ncu-rep --page source --csv --print-source sass > $OUT/src-$n.csv 2>&1 && gzip -f $OUT/src-$n.csv
  rm -f $OUT/p$n.ncu-rep
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Warp Cycles Per Issued|excessive" $OUT/ncu-details-$n.txt | head -6
done
# then, here: python3 bench/diag/ncu_summary.py src-N.csv.gz --top 30
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log) && (cd $OUT && rm -f *.log)
el done
