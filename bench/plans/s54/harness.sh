#!/usr/bin/env bash
# Session 54 (HEAD, on an H200 first): FlashMLA side by side at the 120 shapes with the
# tree, page1, fp8, fp8keys and fp8legal variants (session 47's protocol: --order abba, 150 ms
# warm-up), the keys kernel's tiles by bulk copies (7b7e8d2). Session 53's run of 3fc5103 on the
# H200: FlashMLA / ours 1.114, FP8 / BF16 speed at B 16, q_len 1, 131k 1.49x (H 8) and 1.21x
# (H 16). Predicted from 7b7e8d2's A/B (0.849x and 0.815x the keys kernel's time there): ~1.76x
# and ~1.49x; BF16 shapes as session 53's (1.11-1.12). Its table replaces session 53's as the one
# README cites.
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
COMMIT=${C:-main} PHASE=bench TOTAL_BUDGET=$left BENCH_ARGS="--variants=tree,page1,fp8,fp8keys,fp8legal --order abba --warmup-ms 150" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
tail -4 /tmp/peer/summary.txt 2>/dev/null
tar -czf $OUT/flashmla.tgz -C /tmp peer
