#!/usr/bin/env bash
# session 10, device call 3: (1) what a cooperative launch and a grid barrier cost the split
# kernel at short prefixes (variants of ef13bbe, no combine: nocomb, coop = cooperative launch,
# coopsync = cooperative + cg grid sync at the end; base = the product); (2) the combine's launch
# shape swept by environment overrides (mlav-env: EXP_Q column blocks, EXP_K blocks per SM of the
# spreading reservation, 0 = none; unset = the product's rule)
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call3
P1="--heads 64 --qlen 1,9,33 --prefix 256,1024,4096"
P2="--heads 16,128 --qlen 9 --prefix 256,1024"
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort; }
{ for r in 1 2; do for v in base nocomb coop coopsync; do
    timeout 60 $C/mlav-$v bench --backend cuda $P1 --csv /tmp/a.csv > /dev/null 2>&1 || echo "bench $v $r failed"
    timeout 60 $C/mlav-$v bench --backend cuda $P2 --csv /tmp/b.csv > /dev/null 2>&1 || echo "bench2 $v $r failed"
    j /tmp/a.csv <(cat /tmp/b.csv) > /tmp/j-$v-$r
  done; done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: base nocomb coop coopsync"
    join -t, /tmp/j-base-$r /tmp/j-nocomb-$r | join -t, - /tmp/j-coop-$r | join -t, - /tmp/j-coopsync-$r | tr ',' ' ' | sort -t'|' -n -k2,2 -k3,3 -k4,4
  done
} > $OUT/coop.txt 2>&1
cat $OUT/coop.txt
{ echo "# combine launch shape sweep: rows = batch|heads|q_len|prefix, columns = Q/K (us)"
  hdr="point"
  for r in 1 2; do
  files=()
  for q in def 1 2 4 8 16; do for k in def 0 2 4 8 12 16; do
    e=""; [ $q != def ] && e="EXP_Q=$q"; [ $k != def ] && e="$e EXP_K=$k"
    env $e timeout 60 $C/mlav-env bench --backend cuda $P1 --csv /tmp/a.csv > /dev/null 2>&1 || { echo "env $e failed"; continue; }
    env $e timeout 60 $C/mlav-env bench --backend cuda $P2 --csv /tmp/b.csv > /dev/null 2>&1 || { echo "env2 $e failed"; continue; }
    j /tmp/a.csv <(cat /tmp/b.csv) > /tmp/s-$q-$k
    files+=("$q/$k")
  done; done
  echo "# round $r"
  out=/tmp/s-def-def; cp $out /tmp/acc
  for f in "${files[@]:1}"; do join -t, /tmp/acc /tmp/s-${f%/*}-${f#*/} > /tmp/acc2; mv /tmp/acc2 /tmp/acc; done
  echo "point ${files[*]}"
  tr ',' ' ' < /tmp/acc | sort -t'|' -n -k2,2 -k3,3 -k4,4
  done
} > $OUT/sweep.txt 2>&1
cat $OUT/sweep.txt | cut -c1-400
