#!/usr/bin/env bash
# session 31, call 3, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s31/call3.sh
# Nsight Compute's stall samples per CUDA source line (a -lineinfo build) and per SASS
# instruction of the seesaw kernel after the descriptor change (eed3ce0):
#   q1: B 1, H 128, q_len 16, 131072, page 64 (the matmul-rate point);
#   q2: B 16, H 16, q_len 9, 4096, page 64 (FlashMLA's largest lead in s30).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cmake -S . -B build-li -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF -DCMAKE_CUDA_FLAGS=-lineinfo > build.log 2>&1 && cmake --build build-li -j16 --target mlaverify_cli >> build.log 2>&1 ||
  { grep -m10 -E "error|Error" build.log; exit 1; }
n=0
for pt in "--batch 1 --heads 128 --qlen 16 --prefix 131072 --page-size 64" \
          "--batch 16 --heads 16 --qlen 9 --prefix 4096 --page-size 64"; do
  n=$((n + 1)); el "ncu $n: $pt"
  timeout 150 ncu --clock-control none --section SpeedOfLight --section SourceCounters \
    --section WarpStateStats --section LaunchStats --import-source no -k regex:seesaw --launch-skip 2 -c 1 -f \
    -o $OUT/q$n build-li/mlaverify bench $pt --reps 6 --min-reps 6 --backend cuda > ncu-run-$n.log 2>&1
  echo "ncu rc=$?"
  ncu -i $OUT/q$n.ncu-rep --page details > $OUT/ncu-details-$n.txt 2>&1
  ncu -i $OUT/q$n.ncu-rep --page source --csv --print-source sass > $OUT/src-$n.csv 2>&1 && gzip -f $OUT/src-$n.csv
  ncu -i $OUT/q$n.ncu-rep --page source --csv --print-source cuda > cuda-$n.csv 2>&1
  rm -f $OUT/q$n.ncu-rep
  grep -E "Duration|Warp Cycles Per Issued" $OUT/ncu-details-$n.txt | head -3
done
build-li/mlaverify bench --batch 16 --heads 16 --qlen 9 --prefix 4096 --page-size 64 --backend cuda --reps 20 > bench-q2.log 2>&1
tar -czf $OUT/logs.tgz *.log cuda-*.csv
el done
