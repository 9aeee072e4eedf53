#!/usr/bin/env bash
# session 12, device call 5: the F16 instances at register usage level 10 (head, a45e937's
# source) against the default level (base, 121a5e4); the preset benches BF16 only. Also BF16
# at page_size 64. mlaverify bench, two rounds interleaved.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s12c5
tar -xJf $C/bins.tar.xz -C $C
mkdir -p /tmp/ab
for r in 1 2; do for v in base head; do
  $C/mlav-$v bench --backend cuda --dtype f16 --heads 16,64 --qlen 1,9,33 --prefix 256,4096,131072 \
     --csv /tmp/ab/r$r-$v.csv > /dev/null 2>> /tmp/ab/err.txt
  $C/mlav-$v bench --backend cuda --dtype bf16 --page-size 64 --heads 64 --qlen 9 --prefix 16384,131072 \
     --csv /tmp/ab/r$r-$v-b8.csv > /dev/null 2>> /tmp/ab/err.txt
done; done
tar -cJf $OUT/f16-call5.tar.xz -C /tmp/ab .
cat /tmp/ab/err.txt | head
