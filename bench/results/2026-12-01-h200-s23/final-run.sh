#!/usr/bin/env bash
# the session's last GPU call: sm_90 build, the GPU tests, memcheck of the hostile cases, the
# Python/SGLang GPU flows and the SGLang backend's costs
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el configure; cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real > $OUT/build.log 2>&1
el build; cmake --build build-f -j16 >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el ctest
(cd build-f && timeout 120 ctest --output-on-failure -R "test_fp8|test_cuda_gpu|test_page_rows_gpu|test_wheel|example_engine_loop_cuda") > $OUT/ctest.log 2>&1; grep -E "Test +#|tests passed" $OUT/ctest.log
el steps; MLAV_TEST_STEPS=40 timeout 150 build-f/tests/test_steps_gpu > $OUT/steps.log 2>&1; echo "steps rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" $OUT/steps.log
el memcheck
for f in '*foreign_workspace_gpu*' '*padding_garbage_gpu*' '*run_before_update*'; do MLAV_TEST_FILTER=$f timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_steps_gpu 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tail -2; done > $OUT/memcheck.log
MLAV_TEST_FILTER='*scale_extremes_gpu*' timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_fp8 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tail -3 >> $OUT/memcheck.log
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_page_rows_gpu 2>&1 | grep -E "ERROR SUMMARY" >> $OUT/memcheck.log; cat $OUT/memcheck.log
el python
SGLANG_SRC=$PWD/build-sglang-src MLAVERIFY_LIBRARY=$PWD/build-f/libmlaverify.so PYTHONPATH=$PWD/python timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $OUT/python.log 2>&1; echo "pytest rc=$?"; tail -3 $OUT/python.log
el sglang-bench
MLAVERIFY_LIBRARY=$PWD/build-f/libmlaverify.so PYTHONPATH=$PWD/python timeout 60 python3 -m mlaverify.sglang_bench > $OUT/sglang-bench.txt 2>&1; echo "bench rc=$?"; cat $OUT/sglang-bench.txt | tail -30
el done
