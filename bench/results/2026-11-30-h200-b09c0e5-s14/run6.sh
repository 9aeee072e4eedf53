#!/usr/bin/env bash
# session 14, device call 6: bench/smem_feed.cu, bulk copies 28 iterations ahead, and one copy per iteration (bulk1)
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s14c1
f=$OUT/smem-feed-call6.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $f
cuobjdump -sass -arch sm_90 $C/smem_feed > /tmp/s90.sass
python3 bench/sass_loops.py < /tmp/s90.sass | sed 's/_ZN[^ ]*feedILi\([0-9]*\)ELi\([0-9]*\)E[^ ]*/feed<\1,\2>/' >> $f
for r in 1 2; do echo "== round $r"; $C/smem_feed; done >> $f 2>&1
gzip -c /tmp/s90.sass > $OUT/smem-feed-sm90-call6.sass.gz
grep "^feed<[56]" $f | grep -v "HMMA   0" | head -20
sed -n '/== round 2/,$p' $f | grep -E "kind|none|bulk"
