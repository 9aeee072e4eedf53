#!/usr/bin/env bash
# Prepared in session 34 for the next device session (branch s34-next), from the checkout's root
# with .debs carried:
#   bash bench/results/2026-12-03-h200-s34/next.sh
# test_sm90_shares with its three new shapes that take shares on 132 SMs (a chain at H 128, page
# size 1, an FP8 cache), under racecheck too; then the GPU tests call 4 did not finish
# (test_golden_legal, test_golden_sm90, test_fp8_sm90 and the four _seesaw variants), one at a
# time. Last, the B 1 puzzle (s34 README): does a partial last tile in a block on the critical
# path cost microseconds? B 1, H 64, q_len 16 at prefixes whose uniform schedule (8 splits of
# 9 tiles) ends in a partial tile (4544: 71 tiles and 16 keys) or in full ones (4528: 71 tiles;
# 4592: 72), beside 4096 and 4144.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j16 --target mlaverify test_cuda_gpu test_golden test_backends test_fp8 \
    test_sm90_gpu mlaverify_cli >> build-t.log 2>&1; } || { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
el built
MLAV_TEST_FILTER='test_sm90_shares' timeout $(lim 120) build-t/tests/test_sm90_gpu > shares.log 2>&1
echo "test_sm90_shares rc=$?"; grep -E "blocks|ss |FAILED|PASSED" shares.log | head -20
MLAV_TEST_FILTER='test_sm90_shares' timeout $(lim 120) compute-sanitizer --tool racecheck --error-exitcode 99 \
  build-t/tests/test_sm90_gpu > racecheck.log 2>&1; echo "racecheck rc=$? $(grep SUMMARY racecheck.log | tail -1)"
cd build-t
timeout $(lim 400) ctest --output-on-failure --timeout 200 \
  -R "^(test_golden_legal|test_golden_sm90|test_fp8_sm90|test_cuda_gpu_seesaw|test_golden_seesaw|test_backends_seesaw|test_fp8_seesaw)$" > ../ctest.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|Test +#|FAILED|Failed" ../ctest.log | tail -12
cd ..
for r in 1 2; do
  timeout $(lim 30) build-t/mlaverify bench --backend cuda --batch 1 --heads 64 --qlen 16 \
    --prefix 4096,4144,4528,4544,4592 --page-size 64 --reps 20 --min-reps 5 --csv $OUT/partial-$r.csv > partial-$r.log 2>&1
  cut -d, -f3-6,9 $OUT/partial-$r.csv
done
tar -czf $OUT/logs.tgz *.log
el done
