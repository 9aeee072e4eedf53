#!/usr/bin/env bash
# session 12, device call 6: the multi-stream test under racecheck (426cc69's build, the same
# test and library code as now but the ptxas level), up to 5 runs one after the other, 80 s
# each (a passing run takes 27-34 s). A run still going at 45 s is sampled every 5 s: GPU
# utilization, and each thread of the sanitizer and of the test (state, kernel wait channel,
# CPU), to tell a GPU-side hang (busy GPU) from a host-side one (idle GPU, threads asleep).
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-s12c6
tar -xJf $C/bins.tar.xz -C $C
L=$OUT/streams-stall-call6.txt
for k in 1 2 3 4 5; do
  s=$SECONDS
  compute-sanitizer --tool racecheck --error-exitcode 99 $C/streams-head > /tmp/rc-$k.txt 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - s)) -lt 80 ]; do
    sleep 1
    if [ $((SECONDS - s)) -ge 45 ] && [ $(( (SECONDS - s) % 5 )) -eq 0 ]; then
      { echo "--- run $k at $((SECONDS - s)) s"
        nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv,noheader
        for p in $pid $(pgrep -P $pid); do
          echo "pid $p: $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-80)"
          ps -L -o tid,stat,wchan:28,pcpu,comm -p $p | head -40
        done; } >> $L 2>&1
    fi
  done
  if kill -0 $pid 2>/dev/null; then
    kill -9 $pid $(pgrep -P $pid) 2>/dev/null; wait $pid 2>/dev/null
    echo "run $k: STALLED, killed at $((SECONDS - s)) s; $(grep -c 'bit-identical' /tmp/rc-$k.txt) of 3 cases done" >> $L
    tail -4 /tmp/rc-$k.txt >> $L
    break
  fi
  wait $pid; rc=$?
  echo "run $k: rc=$rc $((SECONDS - s)) s, $(grep -c 'bit-identical' /tmp/rc-$k.txt) of 3 cases, $(grep -o 'RACECHECK SUMMARY.*' /tmp/rc-$k.txt)" >> $L
done
grep '^run' $L
