#!/usr/bin/env bash
# FlashMLA's split kernel and ours under Nsight Compute at the same B 16 shapes, from the peer
# harness's own data (.peer, built as bench/plans/s54/harness.sh builds it): duration, DRAM bytes
# read, L2 hit rate, grid, SpeedOfLight. POINTS "B,H,q,prefix ..." (default: the mixed-bound
# shapes where FlashMLA leads most on the H100, s69, and H 128, q_len 16 for reference);
# EXTRA_METRICS adds metrics (e.g. breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed),
# MAX_LINES (60) the lines kept of each profile, LIBS which libraries (flashmla mlaverify).
#   POINTS="16,16,9,131072" bash bench/plans/s69/ncu_peer.sh      (carry .debs and .peer)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
source bench/plans/s54/peer_build.sh
peer_src
peer_build 16
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,launch__grid_size
metrics+=,gpu__time_duration.sum,sm__cycles_active.avg${EXTRA_METRICS:+,$EXTRA_METRICS}
for pt in ${POINTS:-16,16,9,131072 16,8,9,131072 16,64,2,131072 16,128,16,131072}; do
  IFS=, read -r b h q p <<< "$pt"
  for lib in ${LIBS:-flashmla mlaverify}; do
    echo "##### B $b H $h q_len $q prefix $p: $lib"
    PYTHONDONTWRITEBYTECODE=1 MLAVERIFY_LIBRARY=/tmp/mlav-build/libmlaverify.so \
      PYTHONPATH=/tmp/src-r/python timeout ${PT_CAP:-90} ncu --section SpeedOfLight \
      --metrics "$metrics" -k regex:'splitkv_mla|flash_sm90' -c 2 \
      python3 .peer/flashmla/bench_flashmla.py --out /tmp/ncu-out --budget 60 --batch "$b" \
      --heads "$h" --qlen "$q" --prefix "$p" --libs "$lib" --variants= --copy-gib 0.25 \
      --mm-n 1024 --warmup-ms 1 --rep-ms 2 2>&1 | grep -v '^==PROF==' \
      | grep -E 'flash|Duration|dram__|lts__|launch__grid|sm__cycles|Throughput|gpu__time|Memory' \
      | head -"${MAX_LINES:-60}"
  done
done
