#!/usr/bin/env bash
# Session 43 call 1 (checkout root, .debs carried): HEAD's tests on the GPU (7526f8a's
# mlav_rows_visible64 never ran on one), A/B of HEAD (k) against 38ddfa1's kernel code
# (b = HEAD with bench/results/2026-12-04-h200-s43/rows64.patch reversed), the FP8 instance's SASS around its conversion, and
# two Nsight Compute profiles (FP8 seesaw at B16 H8 q1 131k; BF16 seesaw at B16 H128 q16 131k).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
BUDGET=270 CONFIGS="p64:2 p1:2 tree:2 fp8:1" TEST_TREES=k \
  TEST_TARGETS="test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8 test_kernel_rules test_sm90_layouts_gpu" \
  bash bench/ab_trees.sh b=-bench/results/2026-12-04-h200-s43/rows64.patch k
el ab
MLAV_SM90_CASES=6 timeout $(lim 90) build-k/tests/test_sm90_gpu > k-sm90.log 2>&1
echo "k test_sm90_gpu rc=$? ss ok $(grep '^  ss ' k-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' k-sm90.log); $(grep -E 'PASSED|FAILED' k-sm90.log | tr '\n' ' ')"
el sm90
(cd build-k && timeout $(lim 150) ctest --timeout 100 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden_sm90|test_cuda_gpu_sm90|test_fp8_sm90|test_kernel_rules|test_sm90_layouts_gpu)$" > ../k-ctest.log 2>&1
 echo "k ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../k-ctest.log | head -20)
el ctest
o=$(find build-k -name 'instances_e4m3.cu.o' | head -1)
cuobjdump -sass "$o" > e4m3.sass 2>&1
echo "e4m3 sass lines $(wc -l < e4m3.sass); F2FP $(grep -c F2FP e4m3.sass); by kind:"; grep -o 'F2FP[.A-Z0-9_]*' e4m3.sass | sort | uniq -c
grep -n -m3 -B3 -A12 'F2FP.*E4M3\|E4M3.*F2FP\|F2FP.F16.E4M3' e4m3.sass | head -60
gzip -k e4m3.sass; cp e4m3.sass.gz $OUT/
el sass
ncu --clock-control none -k regex:seesaw --launch-skip 2 --launch-count 1 --section ComputeWorkloadAnalysis \
  --section InstructionStats --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
  build-k/mlaverify bench --backend cuda --batch 16 --heads 8 --qlen 1 --prefix 131072 --page-size 64 --kv-dtype fp8 \
  --reps 5 --min-reps 3 --max-seconds 0.2 > ncu-fp8.txt 2>&1; echo "ncu fp8 rc=$?"
el ncu1
ncu --clock-control none -k regex:seesaw --launch-skip 2 --launch-count 1 --section ComputeWorkloadAnalysis \
  --section InstructionStats --section WarpStateStats --section SpeedOfLight \
  build-k/mlaverify bench --backend cuda --batch 16 --heads 128 --qlen 16 --prefix 131072 --page-size 64 \
  --reps 5 --min-reps 3 --max-seconds 0.2 > ncu-bf16.txt 2>&1; echo "ncu bf16 rc=$?"
el ncu2
cp ncu-fp8.txt ncu-bf16.txt $OUT/
tar -czf $OUT/logs.tgz build-ab-trees/*.log k-*.log
el done
