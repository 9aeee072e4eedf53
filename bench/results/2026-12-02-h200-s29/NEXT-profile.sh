#!/usr/bin/env bash
# Prepared for the next session, not run: one device call (~300 s) from the checkout's root with
# .debs carried:
#   bash bench/results/2026-12-02-h200-s29/NEXT-profile.sh
# (1) memcheck and initcheck on the seesaw kernel as it now stands (mbarrier hand-overs, page
#     ids a pair ahead, no L2 prefetch: session 29 ran racecheck and synccheck on it, not these);
# (2) Nsight Compute on the seesaw kernel where FlashMLA leads: B 1, H 128, q_len 16, 131072
#     (0.73-0.75 of the matmul rate in the peer harness against FlashMLA's 0.84-0.88) and B 16,
#     H 64, q_len 16, 4096 (1.20x FlashMLA's time; 256 unsplit items of 65 tiles), stall samples
#     per SASS instruction, so that the next change is chosen from a profile.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cmake -S . -B build -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF > build.log 2>&1 && cmake --build build -j16 --target mlaverify_cli test_sm90_gpu >> build.log 2>&1 ||
  { cmake --build build -j16 >> build.log 2>&1 || grep -m10 -E "error|Error" build.log; }
for tool in memcheck initcheck; do
  el $tool
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout 120 compute-sanitizer --tool $tool \
    --error-exitcode 99 build/tests/test_sm90_gpu > $OUT/$tool.log 2>&1
  echo "$tool rc=$? ss runs: $(grep -c '^  ss ' $OUT/$tool.log) ok: $(grep '^  ss ' $OUT/$tool.log | grep -c ': ok')"
  grep -E "SUMMARY" $OUT/$tool.log | tail -1
done
n=0
for pt in "--batch 1 --heads 128 --qlen 16 --prefix 131072" "--batch 16 --heads 64 --qlen 16 --prefix 4096"; do
  n=$((n + 1)); el "ncu $n: $pt"
  timeout 120 ncu --clock-control none --section SpeedOfLight --section SourceCounters \
    --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:seesaw --launch-skip 2 -c 1 -f \
    -o $OUT/p$n build/mlaverify bench $pt --page-size 64 --reps 6 --min-reps 6 --backend cuda \
    > $OUT/ncu-run-$n.log 2>&1; echo "ncu rc=$?"
  ncu -i $OUT/p$n.ncu-rep --page details > $OUT/ncu-details-$n.txt 2>&1
  ncu -i $OUT/p$n.ncu-rep --page source --csv --print-source sass > $OUT/src-$n.csv 2>&1 && gzip $OUT/src-$n.csv
  rm -f $OUT/p$n.ncu-rep
  grep -E "Duration|Throughput|Tensor|Issued|Warp Cycles" $OUT/ncu-details-$n.txt | head -12
done
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log) && (cd $OUT && rm -f *.log)
el done
