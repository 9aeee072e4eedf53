#!/usr/bin/env bash
# session 12, device call 3: source variants dropped in sessions 9-11 for re-allocating the loop,
# tried again at ptxas register usage level 10, against 9a77f4c (h10): K fragments three steps
# ahead (k3), V fragments in fours (pv4), S in two accumulator sets (dual), and page size 1
# only (pA, wrong for other page sizes: timing only). mlaverify bench, two rounds interleaved.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s12c3
tar -xJf $C/bins.tar.xz -C $C
mkdir -p /tmp/ab
for r in 1 2; do for v in h10 k3 pv4 dual pA; do
  $C/mlav-$v bench --backend cuda --heads 16,64 --qlen 1,9,33 --prefix 1024,16384,131072 \
     --csv /tmp/ab/r$r-$v.csv > /dev/null 2>> /tmp/ab/err.txt
  $C/mlav-$v bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 32768 \
     --csv /tmp/ab/r$r-$v-b8.csv > /dev/null 2>> /tmp/ab/err.txt
done; done
tar -cJf $OUT/variants-l10-call3.tar.xz -C /tmp/ab .
cat /tmp/ab/err.txt | head
