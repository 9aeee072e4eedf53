#!/usr/bin/env bash
# call 1: sm_90 build; test_fp8 (the F32 split fix) with memcheck; the torch out-variant graph
# test; A/B of the FP8 and STEP instances against 3445dec (production, both caches, engine)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el configure; cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real > $OUT/build.log 2>&1
el build; cmake --build build-f -j16 >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el fp8; (cd build-f && timeout 100 ctest --output-on-failure -R "test_fp8|test_cuda_gpu") > $OUT/ctest.log 2>&1; grep -E "Test +#|tests passed" $OUT/ctest.log
MLAV_TEST_FILTER='*scale_extremes*' timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_fp8 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED|seed" | tail -4 | tee $OUT/memcheck.log
el torch; MLAVERIFY_LIBRARY=$PWD/build-f/libmlaverify.so PYTHONPATH=$PWD/python timeout 60 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_torch.py > $OUT/torch.log 2>&1; echo "pytest rc=$?"; tail -3 $OUT/torch.log
for r in 1 2; do
  el ab$r; OUT=$OUT/ab$r AB_CSV_DIR=build-ab-csv$r timeout 200 bash bench/ab.sh .ab-base/3445dec --preset production --kv-dtype bf16,fp8 --engine 1.5 > /dev/null 2>&1; echo "ab rc=$?"
  awk 'NR>3 && $9+0 > 1.01' $OUT/ab$r/ab.txt | head -20
done
el done
