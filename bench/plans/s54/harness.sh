#!/usr/bin/env bash
# FlashMLA beside the checkout at the issue's 120 shapes (session 47's protocol: --order abba,
# 150 ms warm-up): FlashMLA's harness built (.peer, patched as README.md says), then its benchmark
# with HB s of budget (default 560), ours and FlashMLA's times side by side in
# $OUT/flashmla.tgz. VARIANTS names the variants (default tree,page1,fp8,fp8keys,fp8legal;
# fp8staged needs harness-fp8staged.patch in .peer). C labels the run (the working tree is what
# is built). On an H200 its table is the one README cites.
#   VARIANTS=tree,page1,fp8,fp8keys,fp8legal,fp8staged C=<HEAD> bash bench/plans/s54/harness.sh
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
source bench/plans/s54/peer_build.sh
peer_src
peer_build 16
left=$(( ${HB:-560} - ($(date +%s) - t0) ))
COMMIT=${C:-main} PHASE=bench TOTAL_BUDGET=$left BENCH_ARGS="--variants=${VARIANTS:-tree,page1,fp8,fp8keys,fp8legal} --order abba --warmup-ms 150" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
tail -4 /tmp/peer/summary.txt 2>/dev/null
tar -czf $OUT/flashmla.tgz -C /tmp peer
