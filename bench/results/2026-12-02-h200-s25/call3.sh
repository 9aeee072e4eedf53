#!/usr/bin/env bash
# call 3: the merged tree (6d7bfa7: shard-aware verify, cuda-naive plans for limits, one Python
# run body, the sm_90a FP8 path behind the rule, the NCCL exchange) on the H200: GPU ctest, Python
# GPU flows (SGLang FP8 graph flows included), NCCL memcheck in detail
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
NCCL_ROOT=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null)
export LD_LIBRARY_PATH=$NCCL_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
el build; cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DNCCL_ROOT=$NCCL_ROOT > build-f.log 2>&1
cmake --build build-f -j16 >> build-f.log 2>&1 || { grep -E "error" build-f.log | head -30; exit 1; }
build-f/mlaverify info | grep -E "flash"
el ctest
(cd build-f && timeout 330 ctest -j8 -L gpu --output-on-failure) > $OUT/ctest.log 2>&1
grep -E "tests passed|tests failed|\*\*\*|Failed|Timeout" $OUT/ctest.log | head -30
el python
SGLANG_SRC=$PWD/build-sglang-src MLAVERIFY_LIBRARY=$PWD/build-f/libmlaverify.so PYTHONPATH=$PWD/python timeout 170 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_shard.py python/tests/test_steps.py python/tests/test_cp_merge.py python/tests/test_torch.py "python/tests/test_sglang_conformance.py::test_cuda_graphs_through_sglang" > $OUT/python.log 2>&1; echo "pytest rc=$?"; tail -5 $OUT/python.log
el "nccl memcheck"
timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 build-f/tests/test_cp_nccl_gpu > $OUT/nccl-memcheck.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/nccl-memcheck.log | tail -3; grep -m3 -A6 "=========.*Invalid\|========= Program hit" $OUT/nccl-memcheck.log | head -30
el done
