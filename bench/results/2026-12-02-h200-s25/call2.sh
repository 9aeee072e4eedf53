#!/usr/bin/env bash
# call 2: the sm_90a FP8 path and the NCCL exchange on the H200 (c533c36 + tree)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
NCCL_ROOT=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null)
echo "NCCL_ROOT=$NCCL_ROOT"; ls $NCCL_ROOT/include $NCCL_ROOT/lib 2>&1 | head -6
el build; cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DNCCL_ROOT=$NCCL_ROOT > build-f.log 2>&1
grep -E "NCCL|Hopper" build-f.log
cmake --build build-f -j16 >> build-f.log 2>&1 || { grep -E "error" build-f.log | head -30; tail -20 build-f.log; exit 1; }
build-f/mlaverify info | grep -E "flash|H200|NCCL|nccl"
el tests
(cd build-f && LD_LIBRARY_PATH=$NCCL_ROOT/lib timeout 240 ctest -j6 --output-on-failure -R "test_sm90|test_fp8|_sm90$|_legal$|test_cp_nccl|test_merge") > $OUT/ctest.log 2>&1
grep -E "Test +#|tests passed|FAILED|tests failed" $OUT/ctest.log
el "golden"
for fam in sm90 legal; do echo "== golden $fam"; env MLAV_FLASH_FAMILY=$fam timeout 120 build-f/mlaverify check --backend cuda golden 2>&1 | tail -2; done
el "sanitizers"
{ for tool in racecheck synccheck; do MLAV_TEST_FILTER='test_sm90_fp8_random' MLAV_SM90_CASES=4 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 build-f/tests/test_sm90_gpu 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" | tail -3; done
  MLAV_TEST_FILTER='test_sm90_fp8*' MLAV_SM90_CASES=4 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_sm90_gpu 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tail -3
  timeout 60 compute-sanitizer --tool initcheck --error-exitcode 99 build-f/tests/test_sm90_layouts_gpu 2>&1 | grep -E "ERROR SUMMARY|PASS|FAIL" | tail -3
  LD_LIBRARY_PATH=$NCCL_ROOT/lib timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_cp_nccl_gpu 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tail -3; } > $OUT/sanitizers.log 2>&1
cat $OUT/sanitizers.log
el "fp8 vs bf16 points"
for fam in sm90 legal; do
  env MLAV_FLASH_FAMILY=$fam timeout 60 build-f/mlaverify bench --backend cuda --batch 16 --heads 8,16 --qlen 1 --prefix 131072 --page-size 64 --tree chain --kv-dtype bf16,fp8 2>&1 | tail -6
  for b in 1 16; do env MLAV_FLASH_FAMILY=$fam timeout 60 build-f/mlaverify bench --backend cuda --batch $b --heads 128 --qlen 16 --prefix 131072 --page-size 64 --tree chain --kv-dtype bf16,fp8 2>&1 | tail -4; done
done > $OUT/fp8-points.txt 2>&1
cat $OUT/fp8-points.txt
el "python cp"
MLAVERIFY_LIBRARY=$PWD/build-f/libmlaverify.so PYTHONPATH=$PWD/python timeout 100 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_cp_merge.py python/tests/test_merge.py 2>&1 | tail -3
el done
