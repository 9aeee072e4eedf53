#!/usr/bin/env bash
# session 14, device call 7: bench/smem_feed.cu with the cp.async variants (.ca, zero-fill form)
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s14c1
f=$OUT/smem-feed-call7.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $f
cuobjdump -sass -arch sm_90 $C/smem_feed > /tmp/s90.sass
python3 bench/sass_loops.py < /tmp/s90.sass | sed 's/_ZN[^ ]*feedILi\([0-9]*\)ELi\([0-9]*\)E[^ ]*/feed<\1,\2>/' >> $f
for r in 1 2; do echo "== round $r"; $C/smem_feed; done >> $f 2>&1
grep "^feed<[456]" $f | head -30
sed -n '/== round 2/,$p' $f | grep -E "kind|none|cp"
