#!/usr/bin/env bash
# session 13, device call 7: is a persistent split kernel's outer loop affordable? sk = 1b38e41's
# tree with the split kernel's body in a grid-stride loop over the plan's items (the launch
# unchanged: one item per block, the loop runs once), against mw8 (1b38e41). On the VM its BF16
# all-groups code shares 354 of 3,384 instructions in order with the product's: ptxas
# re-allocated the loop. mlaverify bench, two rounds interleaved.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
C=build-s13c7
tar -xJf $C/bins.tar.xz -C $C
mkdir -p /tmp/ab7
for r in 1 2; do for v in mw8 sk; do
  $C/mlav-$v bench --backend cuda --heads 16,64 --qlen 1,9,33 --prefix 256,16384,131072 \
    --csv /tmp/ab7/r$r-$v-a.csv > /dev/null 2>> /tmp/ab7/err.txt
  $C/mlav-$v bench --backend cuda --batch 16 --heads 64 --qlen 9 --prefix 8192 \
    --csv /tmp/ab7/r$r-$v-b.csv > /dev/null 2>> /tmp/ab7/err.txt
done; echo "round $r done $SECONDS s" >> /tmp/ab7/err.txt; done
tar -cJf $OUT/ab-outer-loop-call7.tar.xz -C /tmp/ab7 .
tail -3 /tmp/ab7/err.txt
