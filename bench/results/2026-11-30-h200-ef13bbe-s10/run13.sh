#!/usr/bin/env bash
# session 10, device call 13: the wide block combine (items of 129-256 splits: a lone q_len 1
# request from 16k on) held to 64 registers (8 blocks per SM, so 16 column blocks fit: m8), and
# with 9 preloaded splits (m8p9), against 10892cd (base: 71 registers, 7 per SM, 4 column blocks)
cd "$(dirname "$0")/.."
C=build-call13
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort; }
{ for r in 1 2; do for v in base m8 m8p9; do
    timeout 60 $C/mlav-$v bench --backend cuda --heads 16,64,128 --qlen 1 --prefix 4096,16384,65536,131072 --csv /tmp/a.csv > /dev/null 2>&1 || echo "a $v failed"
    j /tmp/a.csv > /tmp/w-$v-$r
  done; done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: base, m8, m8p9; each / base"
    join -t, /tmp/w-base-$r /tmp/w-m8-$r | join -t, - /tmp/w-m8p9-$r | awk -F, '{printf "%s %8.1f %8.1f %8.1f   %6.3f %6.3f\n",$1,$2,$3,$4,$3/$2,$4/$2}' | sort -t'|' -n -k1,1 -k2,2 -k3,3 -k4,4
  done
} > $OUT/wide.txt 2>&1
cat $OUT/wide.txt
