#!/usr/bin/env bash
# Nsight Compute of the two widest gaps left on the H200 (session 58's table): the seesaw kernel at
# B 16, H 128, q_len 16, 131k (BF16, page_size 64; 0.94 of FlashMLA's speed there, 0.90-0.92 at
# H x q_len >= 128 from 32k; session 41's profile had its tensor pipe active 76% of the cycles
# against FlashMLA's 85%), and the keys kernel at B 16, q_len 1, 131k over an FP8 cache, H 16
# (16 rows: 0.68 of the copy rate on its own bytes) beside H 8 (8 rows: 0.85). The checkout's
# CLI built in build-prof (Release, 90a), one kernel a profile, the details and the warp-state
# and source pages as text under $OUT. `bash bench/plans/s58/profile.sh` (~200 s; carry .debs).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
O=/tmp/prof; rm -rf $O; mkdir -p $O
trap 'tar -czf $OUT/prof.tgz -C /tmp prof' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/machine.txt 2>&1
B=$PWD/build-prof
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_BUILD_TESTS=OFF -DMLAV_NCCL=OFF > $O/build.log 2>&1 &&
  cmake --build $B -j16 --target mlaverify_cli >> $O/build.log 2>&1
rc=$?; echo "build rc=$rc"; el built; [ $rc = 0 ] || exit 1
prof() { # $1 name, $2 kernel regex, then the bench's arguments
  local n=$1 k=$2; shift 2
  timeout 120 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy --section SourceCounters --import-source no -k "regex:$k" -c 1 -f \
    -o /tmp/$n $B/mlaverify bench --backend cuda --reps 3 "$@" > $O/$n-run.log 2>&1
  echo "$n rc=$?"
  ncu -i /tmp/$n.ncu-rep --page details > $O/$n.txt 2>&1
  ncu -i /tmp/$n.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $O/$n-sass.csv.gz
  grep -E "^ +Duration|Warp Cycles Per Issued|Issue Slots Busy|Compute \(SM\) Throughput|DRAM Throughput" \
    $O/$n.txt | head -6
  el $n
}
prof seesaw-b16-h128-q16 seesaw --batch 16 --heads 128 --qlen 16 --prefix 131072 --page-size 64
prof keys16-b16-h16-q1 keys --batch 16 --heads 16 --qlen 1 --prefix 131072 --page-size 64 --kv-dtype fp8
prof keys8-b16-h8-q1 keys --batch 16 --heads 8 --qlen 1 --prefix 131072 --page-size 64 --kv-dtype fp8
el done
