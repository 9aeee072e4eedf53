#!/usr/bin/env bash
# session 12, device call 4: does ptxas's register usage level 10 move the loop's skeleton too?
# bench/loop_ladder.cu (9a77f4c) built at the default level (ladder5) and at 10 (ladder10), with
# the KV pool in the L2 (16,384 rows) and in DRAM (262,144), interleaved.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s12c4
tar -xJf $C/bins.tar.xz -C $C
for pool in 16384 262144; do for v in ladder5 ladder10 ladder5 ladder10; do
  echo "=== $v pool $pool"; s=$SECONDS
  timeout 120 $C/$v 1024 1 $pool; echo "rc=$? $((SECONDS - s)) s"
done; done > $OUT/ladder-l10-call4.txt 2>&1
for v in ladder5 ladder10; do cuobjdump -sass $C/$v | python3 bench/sass_loops.py; done > $OUT/ladder-loops-call4.txt 2>&1
tail -30 $OUT/ladder-l10-call4.txt
