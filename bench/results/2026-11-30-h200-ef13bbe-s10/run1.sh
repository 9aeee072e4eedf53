#!/usr/bin/env bash
# session 10, device call 1: where the short-prefix end-to-end time goes. Variants of ef13bbe
# (build-exp/s10/src, macros EXP_*): base; nocomb (split kernel only); emptycomb (combine exits
# after its PDL wait); emptyboth (split exits at entry, combine after its wait: the two-kernel
# floor); emptysplit1 (split exits at entry, no combine: the one-kernel floor); nopdl.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
{ for r in 1 2; do for v in base nocomb emptycomb emptyboth emptysplit1 nopdl; do
    timeout 100 $C/mlav-$v bench --backend cuda --heads 64 --qlen 1,9,33 --prefix 256,1024,4096,16384 --csv /tmp/a-$v-$r.csv > /tmp/a-$v-$r.txt 2>&1 || echo "bench $v $r failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 16,128 --qlen 1,9 --prefix 256,1024 --csv /tmp/b-$v-$r.csv > /dev/null 2>&1 || echo "bench2 $v $r failed"
    cat /tmp/a-$v-$r.csv <(tail -n +2 /tmp/b-$v-$r.csv) | awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' | sort > /tmp/j-$v-$r
  done
  timeout 60 $C/mlav-base bench --backend cuda --heads 64 --qlen 1,9,33 --prefix 256,1024,4096 --l2 warm --csv /tmp/w-$r.csv > /dev/null 2>&1 || echo "warm $r failed"
  awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' /tmp/w-$r.csv | sort > /tmp/j-warm-$r
  done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: base nocomb emptycomb emptyboth emptysplit1 nopdl base-l2warm"
    join -t, /tmp/j-base-$r /tmp/j-nocomb-$r | join -t, - /tmp/j-emptycomb-$r | join -t, - /tmp/j-emptyboth-$r | join -t, - /tmp/j-emptysplit1-$r | join -t, - /tmp/j-nopdl-$r | join -t, -a1 -e - -o auto - /tmp/j-warm-$r | tr ',' ' ' | sort -t'|' -n -k2,2 -k3,3 -k4,4
  done
  grep -h "^# ceil" /tmp/a-base-1.txt
} > $OUT/floors.txt 2>&1
cat $OUT/floors.txt
