#!/usr/bin/env bash
# call 4 (this tree): FlashMLA beside mlaverify (../shared/peers/flashmla with its extension:
# the 120 shapes, the legal family, a tree, page_size 1, FP8, both ceilings), then the GPU tests
# the merged staging ring and shard fixture reach (test_steps_gpu, test_shard_gpu, test_fp8 under
# both families), test_sm90_layouts_gpu and sm90_timing (TU_CK)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
el flashmla
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo ${COMMIT:-unknown}) FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=330 \
  OUT=$OUT/peer bash .peer/flashmla/run.sh . 2>&1 | tail -12
( cd $OUT/peer && tar czf ../peer-logs.tgz $(ls | grep -v -E '^(results.md|variants.md|results.jsonl|summary.txt)$') &&
  ls | grep -v -E '^(results.md|variants.md|results.jsonl|summary.txt)$' | xargs rm -rf )
el build
cmake -S . -B build-t -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF > build-t.log 2>&1
cmake --build build-t -j16 >> build-t.log 2>&1 || { grep -m10 error build-t.log; }
el ctest
( cd build-t && timeout 240 ctest --output-on-failure --timeout 200 \
  -j3 -R '^(test_steps_gpu.*|test_shard_gpu.*|test_fp8_legal|test_fp8_sm90|test_sm90_layouts_gpu|test_shard)$' ) > $OUT/ctest.log 2>&1
echo "ctest rc=$?"; grep -E "Test +#|tests passed|tests failed|Not Run|Timeout" $OUT/ctest.log | tail -14
el sm90_timing; timeout 30 build-t/tests/sm90_timing 3 8 2>&1 | tail -2
el done
