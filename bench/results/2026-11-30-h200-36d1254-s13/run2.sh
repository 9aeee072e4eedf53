#!/usr/bin/env bash
# session 13, device call 2: the full suite of the session's commit (built on the host), then
# batched points an engine serves (not in any preset): B = 32 at H = 16 (q_len 1 and 4) and
# H = 128 (q_len 1), prefixes 4096 and 32768, page_size 1 and 64; B = 16 H = 64 q_len 9 at 8192.
cd "$(dirname "$0")/.."
COMMIT=$1 BENCH_ARGS="--preset full" SUITE_BUDGET=480 bash bench/gpu-suite.sh > /dev/null 2>&1
cli=build-gpu/src/cli/mlaverify
E=$OUT/engine-points.txt
for ps in 1 64; do
  $cli bench --backend cuda --batch 32 --heads 16,128 --qlen 1,4 --prefix 4096,32768 --page-size $ps >> $E 2>&1
done
$cli bench --backend cuda --batch 16 --heads 64 --qlen 9 --prefix 8192 >> $E 2>&1
tail -25 $OUT/suite.log
cat $E | grep -v '^#' | head -60
