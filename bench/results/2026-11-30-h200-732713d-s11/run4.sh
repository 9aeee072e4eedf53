#!/usr/bin/env bash
# session 11, device call 4: where a q_len 1 tile's time goes (H = 16: the skipping instance,
# one group working; H = 64: all groups). 732713d's kernel: flash_trace timing-only, phases and
# per-tile stamps at prefix 16384 (KV fits the L2) and 131072; then ncu stall details.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call4
tar -xJf $C/bins.tar.xz -C $C
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
{ for pt in "1 16384 16" "1 131072 16" "1 131072 64" "9 131072 64"; do
    set -- $pt
    echo "######## q_len $1 prefix $2 H $3"
    timeout 60 $C/ft-timing $1 $2 $3 2>&1 | tail -2
    timeout 60 $C/ft-phases $1 $2 $3 2>&1 | grep -A12 "phases of one more"
    timeout 60 $C/ft-trace $1 $2 $3 2>&1 | grep -B1 -A12 "^warp " | head -30
  done
} > $OUT/trace.txt 2>&1
cat $OUT/trace.txt
mkdir -p $OUT/ncu
OUT=$OUT/ncu DETAILS=1 timeout 400 bash bench/ncu.sh "16 1 131072" "64 1 131072" > /dev/null 2>&1
grep -E "#####|Duration|Warp Cycles Per Issued|Stall|Issue Slots Busy|Eligible|Active Warps|L2 Hit|DRAM Throughput|Mem Busy|Max Bandwidth|smsp__pcsamp" $OUT/ncu/ncu.txt | head -120
