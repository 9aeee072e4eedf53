#!/usr/bin/env bash
# session 14, device call 3: the suite of HEAD (full preset), then bench/smem_feed.cu (built on the
# VM for sm_90 and sm_120) twice, with its sm_90 loop bodies from cuobjdump.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
COMMIT=$1 BENCH_ARGS="--preset full" SUITE_BUDGET=420 bash bench/gpu-suite.sh > /dev/null 2>&1
C=build-s14c1
f=$OUT/smem-feed-call3.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $f
cuobjdump -sass -arch sm_90 $C/smem_feed > /tmp/s90.sass
python3 bench/sass_loops.py < /tmp/s90.sass | sed 's/_ZN[^ ]*feedILi\([0-9]*\)ELi\([0-9]*\)E[^ ]*/feed<\1,\2>/' >> $f
for r in 1 2; do echo "== round $r"; $C/smem_feed; done >> $f 2>&1
tail -25 $OUT/suite.log
sed -n '/== round 2/,$p' $f
