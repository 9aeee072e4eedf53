#!/usr/bin/env bash
# call 5 (the session's last): the final tree on the H200. Build (sm_90); the GPU tests of both
# families (the sm_90a family now also runs plans for limits); golden on cuda with each family;
# the Python GPU flows; the legal family's A/B against 3445dec (production with engine rows, two
# rounds; full, one round); the family A/B with engine rows; sanitizers on the new kernels.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - t0) )); }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el build; cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real > build-f.log 2>&1
cmake --build build-f -j16 >> build-f.log 2>&1 || { tail -30 build-f.log; exit 1; }
build-f/mlaverify info | grep -E "flash|H200" | tee $OUT/steps-golden.log
el tests
(cd build-f && timeout 200 ctest -j6 --output-on-failure -R "test_merge|test_sm90|test_cuda_gpu|test_page_rows_gpu|test_fp8|test_cuda_streams_gpu|example_engine_loop_cuda|test_layers") > $OUT/ctest.log 2>&1 &
cpid=$!
(for fam in sm90 legal; do
   echo "== steps $fam"; env $( [ $fam = legal ] && echo MLAV_FLASH_FAMILY=legal ) MLAV_TEST_STEPS=20 timeout 120 build-f/tests/test_steps_gpu 2>&1 | grep -E "^\[  (PASSED|FAILED)|FAILED  \]|ERROR"
   echo "== golden $fam"; env $( [ $fam = legal ] && echo MLAV_FLASH_FAMILY=legal ) timeout 120 build-f/mlaverify check --backend cuda golden 2>&1 | tail -3
 done) >> $OUT/steps-golden.log 2>&1 &
spid=$!
SGLANG_SRC=$PWD/build-sglang-src MLAVERIFY_LIBRARY=$PWD/build-f/libmlaverify.so PYTHONPATH=$PWD/python timeout 200 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_merge.py python/tests/test_torch.py python/tests/test_steps.py python/tests/test_sglang_backend.py python/tests/test_sglang_conformance.py python/tests/test_validation.py > $OUT/python.log 2>&1; echo "pytest rc=$?"; tail -4 $OUT/python.log
wait $cpid; wait $spid
grep -E "Test +#|tests passed|FAILED" $OUT/ctest.log; cat $OUT/steps-golden.log
el "ab (left $(left)s)"
for r in 1 2; do
  MLAV_FLASH_FAMILY=legal OUT=$OUT/abp$r AB_CSV_DIR=build-ab-csv timeout 150 bash bench/ab.sh .ab-base/3445dec --preset production --kv-dtype bf16,fp8 --engine 1.5 > /dev/null 2>&1; echo "ab production $r rc=$?"
done
el "ab full (left $(left)s)"
[ $(left) -gt 200 ] && { MLAV_FLASH_FAMILY=legal OUT=$OUT/abf1 AB_CSV_DIR=build-ab-csv timeout 150 bash bench/ab.sh .ab-base/3445dec --preset full --kv-dtype bf16,fp8 > /dev/null 2>&1; echo "ab full rc=$?"; }
el "family (left $(left)s)"
for fam in sm90 legal; do
  env $( [ $fam = legal ] && echo MLAV_FLASH_FAMILY=legal ) build-f/mlaverify bench --backend cuda --preset production --kv-dtype bf16 --engine 1.5 --csv build-f/fam-$fam.csv --engine-csv build-f/fam-$fam-engine.csv > build-f/fam-$fam.txt 2>&1 || tail build-f/fam-$fam.txt
done
key='NR>1 && $1=="cuda" {print $3"|"$4"|"$5"|"$6"|"$7","$9}'
join -t, <(awk -F, "$key" build-f/fam-legal.csv | sort) <(awk -F, "$key" build-f/fam-sm90.csv | sort) |
  awk -F'[|,]' '{printf "%6s %6s %6s %8s %5s %10.1f %10.1f %7.3f\n", $1,$2,$3,$4,$5,$6,$7,$6/$7}' |
  sort -k1,1n -k2,2n -k3,3n -k4,4n > build-f/family-ab.txt
{ echo "exact plans: batch heads q_len prefix page legal_us sm90_us legal/sm90"; cat build-f/family-ab.txt
  awk '{l+=log($8); n++} END {printf "exact: geomean legal/sm90 %.3f over %d points\n", exp(l/n), n}' build-f/family-ab.txt
  echo "engine rows: sm90 / legal (bench/diag/engine_cmp.py, base = legal)"
  python3 bench/diag/engine_cmp.py build-f/fam-legal-engine.csv build-f/fam-sm90-engine.csv sm90; } > $OUT/family.txt
grep -E "geomean|SUMMARY" $OUT/family.txt
el "sanitizers (left $(left)s)"
if [ $(left) -gt 60 ]; then
  { MLAV_TEST_FILTER=test_sm90_bad_page_ids timeout 100 compute-sanitizer --tool racecheck --error-exitcode 99 build-f/tests/test_sm90_gpu 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" | tail -3
    MLAV_TEST_FILTER=test_sm90_bad_page_ids timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_sm90_gpu 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tail -3
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_merge_gpu 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tail -2; } > $OUT/sanitizers.log 2>&1
  cat $OUT/sanitizers.log
fi
el done
