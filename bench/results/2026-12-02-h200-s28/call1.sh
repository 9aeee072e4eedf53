#!/usr/bin/env bash
# call 1 (main, 9090745): what session 27 left unmeasured on the landed tree -- compute-sanitizer
# (racecheck, synccheck, memcheck, initcheck) on test_sm90_gpu's TMA cases with the producer's
# three feeds, the host cost of the KV pool's tensor-map encode, and Nsight Compute's stall
# samples per SASS instruction at the tensor-bound point (B 1, H 128, q_len 16, 131072, page 64)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
R=bench/results/2026-12-02-h200-s28
el build
cmake -S . -B build -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF > build.log 2>&1
cmake --build build -j16 --target test_sm90_gpu mlaverify_cli >> build.log 2>&1 || { grep -m10 error build.log; exit 1; }
nvcc -O2 -std=c++17 -arch=sm_90a -Isrc/cuda/sm90 -Isrc/cuda -Iinclude $R/enc.cu -o build/enc &
el "encode cost"
wait; build/enc | tee $OUT/encode.txt
for tool in racecheck synccheck memcheck initcheck; do
  el $tool
  MLAV_SM90_CASES=3 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 \
    build/tests/test_sm90_gpu > $OUT/$tool.log 2>&1; echo "$tool rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.log | tail -3
done
el "ncu source"
pt="--batch 1 --heads 128 --qlen 16 --prefix 131072 --page-size 64 --reps 6 --min-reps 6 --backend cuda"
timeout 150 ncu --clock-control none --section SpeedOfLight --section SourceCounters --section WarpStateStats \
  -k regex:flash_sm90 --launch-skip 2 -c 1 -f -o $OUT/src build/mlaverify bench $pt > $OUT/ncu-run.log 2>&1; echo "ncu rc=$?"
ncu -i $OUT/src.ncu-rep --page details > $OUT/ncu-details.txt 2>&1
ncu -i $OUT/src.ncu-rep --page source --csv --print-source sass > $OUT/src-sm90.csv 2>&1 && gzip $OUT/src-sm90.csv
rm -f $OUT/src.ncu-rep
grep -E "Duration|Throughput|Tensor|Issued|Warp Cycles" $OUT/ncu-details.txt | head -20
tar -czf $OUT/logs.tgz -C $OUT racecheck.log synccheck.log memcheck.log initcheck.log ncu-run.log && rm -f $OUT/*check.log $OUT/ncu-run.log
el done; ls -la $OUT
