#!/usr/bin/env bash
# session 12, device call 1.
# A: ptxas options for verify_flash.cu only (HEAD 121a5e4 otherwise): base, -regUsageLevel=0,
#    =10, -O1, -dlcm=cg, -dlcm=cg + regUsageLevel=10; mlaverify bench, two rounds interleaved.
# B: the multi-stream test under racecheck, 4 with PDL (head) and 4 without (nopdl), all at once,
#    180 s limit each (a passing run took 27-34 s alone).
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s12c1
tar -xJf $C/bins.tar.xz -C $C
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
V="base rul0 rul10 O1 dlcmcg cgrul10"
for r in 1 2; do for v in $V; do
  $C/mlav-$v bench --backend cuda --heads 16,64 --qlen 1,9,33 --prefix 256,1024,4096,16384,131072 \
     --csv $OUT/r$r-$v.csv > /dev/null 2>> $OUT/bench-err.txt
  $C/mlav-$v bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 32768 \
     --csv $OUT/r$r-$v-b8.csv > /dev/null 2>> $OUT/bench-err.txt
  echo "round $r $v done $SECONDS s" >> $OUT/progress.txt
done; done
cd $OUT && tar -cJf bench-csv.tar.xz r*.csv && rm r*.csv && cd - > /dev/null
# B
s=$SECONDS
for k in 1 2 3 4; do for v in head nopdl; do
  ( t=$SECONDS; timeout -s KILL 180 compute-sanitizer --tool racecheck --error-exitcode 99 $C/streams-$v \
      > /tmp/rc-$v-$k.txt 2>&1; rc=$?
    echo "$v #$k: rc=$rc $((SECONDS - t))s, $(grep -c 'bit-identical' /tmp/rc-$v-$k.txt) of 3 cases, $(grep -o 'RACECHECK SUMMARY.*' /tmp/rc-$v-$k.txt)" >> $OUT/stall.txt ) &
done; done
wait
echo "all racecheck runs: $((SECONDS - s)) s" >> $OUT/stall.txt
for f in /tmp/rc-*.txt; do echo "== $f"; tail -5 $f; done > $OUT/stall-tails.txt
cat $OUT/progress.txt $OUT/stall.txt
