#!/usr/bin/env bash
# call 4: main with the sm_90a family wired into the cuda backend: build (sm_90), the GPU tests of
# both families, the merge and sm90 tests, info, the family A/B through the backend, sm90_timing
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el configure; cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real > $OUT/build.log 2>&1
el build; cmake --build build-f -j16 >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
build-f/mlaverify info | tee $OUT/info.txt
el ctest
(cd build-f && timeout 300 ctest -j4 --output-on-failure -R "test_cuda_gpu|test_golden|test_backends|test_page_rows_gpu|test_sm90_gpu|test_merge|test_fp8|example_engine_loop_cuda|test_cuda_streams") > $OUT/ctest.log 2>&1; grep -E "Test +#|tests passed|FAILED" $OUT/ctest.log
el steps; MLAV_TEST_STEPS=20 timeout 120 build-f/tests/test_steps_gpu > $OUT/steps.log 2>&1; echo "steps rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/steps.log
el family-ab
for fam in sm90 legal; do
  env $( [ $fam = legal ] && echo MLAV_FLASH_FAMILY=legal ) build-f/mlaverify bench --backend cuda --preset production --kv-dtype bf16 --csv build-f/fam-$fam.csv > build-f/fam-$fam.txt 2>&1 || tail build-f/fam-$fam.txt
done
key='NR>1 && $1=="cuda" {print $3"|"$4"|"$5"|"$6"|"$7","$9}'
join -t, <(awk -F, "$key" build-f/fam-legal.csv | sort) <(awk -F, "$key" build-f/fam-sm90.csv | sort) |
  awk -F'[|,]' '{printf "%6s %6s %6s %8s %5s %10.1f %10.1f %7.3f\n", $1,$2,$3,$4,$5,$6,$7,$6/$7}' |
  sort -k1,1n -k2,2n -k3,3n -k4,4n > $OUT/family-ab.txt
echo "legal_us sm90_us legal/sm90:"; cat $OUT/family-ab.txt
awk '{l+=log($8); n++} END {printf "geomean legal/sm90 %.3f over %d points\n", exp(l/n), n}' $OUT/family-ab.txt
el timing; timeout 150 build-f/bench/diag/sm90_timing > $OUT/sm90_timing.log 2>&1; echo "timing rc=$?"; tail -8 $OUT/sm90_timing.log
el done
