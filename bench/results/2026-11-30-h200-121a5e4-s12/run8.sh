#!/usr/bin/env bash
# session 12, device call 8: bench/pdl_sanitizer_repro.cu (the multi-stream test's launch pattern
# without the library: a primary kernel of three waves that triggers at entry, a programmatic
# dependent that waits, 4 threads x own stream) once plainly, then under racecheck one run after
# the other, 75 s each, until 250 s have passed; a run going at 40 s is sampled every 10 s.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s12c8
tar -xJf $C/bins.tar.xz -C $C
L=$OUT/pdl-repro-call8.txt
s=$SECONDS; $C/pdl_repro 4 >> $L 2>&1; echo "plain: rc=$? $((SECONDS - s)) s" >> $L
t0=$SECONDS; k=0
while [ $((SECONDS - t0)) -lt 250 ]; do
  k=$((k + 1)); s=$SECONDS
  compute-sanitizer --tool racecheck --error-exitcode 99 $C/pdl_repro 2 > /tmp/rr-$k.txt 2>&1 &
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
cat $L
