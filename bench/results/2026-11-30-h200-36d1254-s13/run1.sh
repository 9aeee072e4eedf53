#!/usr/bin/env bash
# session 13, device call 1:
#  1. bench A/B (two rounds, interleaved): head (36d1254), wt (the combine launch through one
#     cudaLaunchKernelExC; kernels unchanged), ofc (verify_flash.cu at level 10 + -Ofc=min: a
#     different allocation of the loop), dscm (level 10 + -dscm=cg: the epilogue's stores);
#  2. golden check of wt on cuda (the combine paths through the new launch);
#  3. bench/pdl_sanitizer_repro.cu with FEATURES=7 (all three features) under racecheck, one run after another, 75 s
#     cap each, until 200 s have passed.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s13c1
tar -xJf $C/bins.tar.xz -C $C
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt
mkdir -p /tmp/ab
for r in 1 2; do for v in head wt ofc dscm; do
  $C/mlav-$v bench --backend cuda --heads 16,64 --qlen 1,9,33 --prefix 256,1024,16384,131072 \
     --csv /tmp/ab/r$r-$v.csv > /dev/null 2>> /tmp/ab/err.txt
  $C/mlav-$v bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 32768 \
     --csv /tmp/ab/r$r-$v-b8.csv > /dev/null 2>> /tmp/ab/err.txt
done; echo "round $r done $SECONDS s" >> /tmp/ab/err.txt; done
tar -cJf $OUT/ab-call1.tar.xz -C /tmp/ab .
G=$OUT/golden-wt-call1.txt
for f in golden/*.safetensors; do $C/mlav-wt check --backend cuda $f >> $G 2>&1; echo "rc=$? $f" >> $G; done
L=$OUT/pdl-repro-features-call1.txt
s=$SECONDS; $C/pdl_repro 4 7 >> $L 2>&1; echo "plain: rc=$? $((SECONDS - s)) s" >> $L
t0=$SECONDS; k=0
while [ $((SECONDS - t0)) -lt 200 ]; do
  k=$((k + 1)); s=$SECONDS
  compute-sanitizer --tool racecheck --error-exitcode 99 $C/pdl_repro 2 7 > /tmp/rr-$k.txt 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - s)) -lt 75 ]; do
    sleep 1
    if [ $((SECONDS - s)) -ge 40 ] && [ $(( (SECONDS - s) % 10 )) -eq 0 ]; then
      echo "--- run $k at $((SECONDS - s)) s: $(nvidia-smi --query-gpu=utilization.gpu,power.draw --format=csv,noheader)" >> $L
    fi
  done
  if kill -0 $pid 2>/dev/null; then
    pkill -9 -f pdl_repro; wait $pid 2>/dev/null
    echo "run $k: STALLED, killed at $((SECONDS - s)) s" >> $L; tail -3 /tmp/rr-$k.txt >> $L
    continue
  fi
  wait $pid; rc=$?
  echo "run $k: rc=$rc $((SECONDS - s)) s: $(grep -o 'pdl.*values' /tmp/rr-$k.txt) $(grep -o 'RACECHECK SUMMARY.*' /tmp/rr-$k.txt)" >> $L
done
cat /tmp/ab/err.txt | tail -5
tail -5 $G; grep -c 'rc=0' $G
cat $L
