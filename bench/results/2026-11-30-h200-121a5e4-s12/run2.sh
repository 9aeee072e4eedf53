#!/usr/bin/env bash
# session 12, device call 2.
# 1. the full suite of a45e937 (verify_flash.cu with ptxas --register-usage-level=10).
# 2. combine.cu with ptxas register usage level 10 and 0 against a45e937 (head); mlaverify
#    bench, two rounds interleaved.
# 3. the loop bodies of 121a5e4 (base) and a45e937 (head): cuobjdump -sass | sass_loops.py.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s12c2
COMMIT=a45e937 BENCH_ARGS="--preset full" SUITE_BUDGET=480 bash bench/gpu-suite.sh > /dev/null 2>&1
tar -xJf $C/bins.tar.xz -C $C
mkdir -p /tmp/ab
for r in 1 2; do for v in head comb10 comb0; do
  $C/mlav-$v bench --backend cuda --heads 16,64,128 --qlen 1,9,33 --prefix 256,1024,4096,16384 \
     --csv /tmp/ab/r$r-$v.csv > /dev/null 2>> /tmp/ab/err.txt
done; done
for v in base head; do cuobjdump -sass $C/mlav-$v | python3 bench/sass_loops.py > /tmp/ab/loops-$v.txt 2>&1; done
tar -cJf $OUT/combine-loops-call2.tar.xz -C /tmp/ab .
grep -A40 'SUMMARY\|summary' $OUT/suite.log | tail -30
