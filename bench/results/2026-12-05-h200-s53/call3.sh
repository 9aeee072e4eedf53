#!/usr/bin/env bash
# Session 53 call 3 (main, alone or after another call; on an H200 first): FlashMLA side by side
# on main at the 120 shapes with the tree, page1, fp8, fp8keys and fp8legal variants
# (session 47's call 1 protocol: --order abba, 150 ms warm-up), the FP8 cache taking the keys
# kernel at most 8 rows a request, and 9-16 from 3 tiles an SM (session 52's rule; fp8keys forces
# it at 9-16 below that too, fp8legal forces the legal family: the rule's two sides at every
# shape of at most 16 rows). On an H200 its table replaces session 47's as the one README cites.
# VARIANTS (added since it ran, its default the variants it ran) names others: fp8staged needs
# bench/plans/s54/harness-fp8staged.patch in .peer.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/src-r && mkdir /tmp/src-r
tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/src-r
rm -rf /tmp/peer && mkdir -p /tmp/peer
COMMIT=${C:-main} FLASHMLA_PREBUILT_SPLITKV=1 PHASE=build OUT=/tmp/peer MAX_JOBS=16 \
  bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/build.log 2>&1; echo "peer build rc=$?"
left=$(( ${HB:-560} - ($(date +%s) - t0) ))
COMMIT=${C:-main} PHASE=bench TOTAL_BUDGET=$left BENCH_ARGS="--variants=${VARIANTS:-tree,page1,fp8,fp8keys,fp8legal} --order abba --warmup-ms 150" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
tail -4 /tmp/peer/summary.txt 2>/dev/null
tar -czf $OUT/flashmla.tgz -C /tmp peer
