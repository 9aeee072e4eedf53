#!/usr/bin/env bash
# call 2: what bounds the sm_90a kernel (both consumes) at a tensor-bound point (B 1, H 128,
# q_len 16, 131072, page 64) and a memory-bound one (B 16, H 8, q_len 1, 131072): Nsight Compute
# sections with details, and the per-SASS-instruction stall samples at the tensor-bound point
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cmake -S . -B build-d -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF > build-d.log 2>&1
cmake --build build-d -j16 --target mlaverify_cli >> build-d.log 2>&1 || { grep -E "error" build-d.log | head -30; exit 1; }
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section InstructionStats"
pt() { echo "--batch $1 --heads $2 --qlen $3 --prefix $4 --page-size 64 --reps 6 --min-reps 6 --backend cuda"; }
for fam in sm90 sm90alt; do for p in "1 128 16 131072" "16 8 1 131072"; do
  el "ncu $fam $p"; echo "##### $fam B H q prefix = $p"
  MLAV_FLASH_FAMILY=$fam timeout 120 ncu --clock-control none $S --print-details all -k regex:flash_sm90 --launch-skip 2 -c 1 build-d/mlaverify bench $(pt $p) 2>&1 | grep -v '^==PROF=='
done; done > $OUT/ncu.txt
grep -E "#####|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc A|Tensor|Warp Cycles Per Issued|Stall" $OUT/ncu.txt | head -80
for fam in sm90 sm90alt; do
  el "source $fam"
  MLAV_FLASH_FAMILY=$fam timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:flash_sm90 --launch-skip 2 -c 1 -f -o $OUT/src-$fam build-d/mlaverify bench $(pt 1 128 16 131072) > /dev/null 2>&1
  ncu -i $OUT/src-$fam.ncu-rep --page source --csv --print-source sass > $OUT/src-$fam.csv 2>&1 && rm -f $OUT/src-$fam.ncu-rep && gzip $OUT/src-$fam.csv
done
ls -la $OUT; el done
