#!/usr/bin/env bash
# The one-wave margin's shapes on the GPU (33531e3): FlashMLA beside the checkout at B 16, 131k
# (the harness's 20 shapes, 14 of which now take equal shares; each checked against FlashMLA and
# an fp32 reference, and the tree and page_size 1 variants), then the golden bundles on `cuda`
# and on the forced sm_90a family.   bash bench/plans/s69/check_shares.sh   (carry .debs, .peer)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
source bench/plans/s54/peer_build.sh
peer_src
(cmake -S . -B build-gpu -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
   -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_BUILD_TESTS=OFF > /tmp/cli.log 2>&1 &&
 cmake --build build-gpu -j 6 --target mlaverify_cli >> /tmp/cli.log 2>&1; echo "cli rc=$?" >> /tmp/cli.log) &
peer_build 10
wait
tail -1 /tmp/cli.log
left=$(( ${HB:-300} - ($(date +%s) - t0) ))
COMMIT=${C:-main} PHASE=bench TOTAL_BUDGET=$left BENCH_ARGS="--batch 16 --prefix 131072 \
--variants=tree,page1 --order abba --warmup-ms 150" OUT=/tmp/peer \
  bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
cat /tmp/peer/summary.txt 2>/dev/null
cp /tmp/peer/variants.md /tmp/peer/summary.txt "$OUT/" 2>/dev/null
for fam in auto sm90; do
  if [ $fam = sm90 ]; then export MLAV_FLASH_FAMILY=sm90; fi
  timeout 120 build-gpu/mlaverify check --backend cuda golden > "$OUT/golden-$fam.log" 2>&1
  echo "golden $fam rc=$?"; tail -1 "$OUT/golden-$fam.log"
done
