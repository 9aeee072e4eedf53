#!/usr/bin/env bash
# session 10, device call 4: one wave against two (and three) at long prefixes. mlav-env2 is
# ef13bbe with EXP_WAVES multiplying the schedule's target blocks (variant-floors.patch + env).
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call4
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort; }
{ for r in 1 2; do for w in 1 2 3; do
    env EXP_WAVES=$w timeout 100 $C/mlav-env2 bench --backend cuda --heads 64 --qlen 9,33 --prefix 4096,16384,65536,131072 --csv /tmp/a.csv > /dev/null 2>&1 || echo "a $w failed"
    env EXP_WAVES=$w timeout 60 $C/mlav-env2 bench --backend cuda --heads 16,128 --qlen 9 --prefix 16384,65536 --csv /tmp/b.csv > /dev/null 2>&1 || echo "b $w failed"
    env EXP_WAVES=$w timeout 60 $C/mlav-env2 bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 4096,32768 --csv /tmp/c.csv > /dev/null 2>&1 || echo "c $w failed"
    env EXP_WAVES=$w timeout 60 $C/mlav-env2 bench --backend cuda --heads 64 --qlen 1 --prefix 65536,131072 --csv /tmp/d.csv > /dev/null 2>&1 || echo "d $w failed"
    j /tmp/a.csv <(tail -n +2 /tmp/b.csv) <(tail -n +2 /tmp/c.csv) <(tail -n +2 /tmp/d.csv) > /tmp/w-$w-$r
  done; done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: 1 wave, 2 waves, 3 waves; 2/1, 3/1"
    join -t, /tmp/w-1-$r /tmp/w-2-$r | join -t, - /tmp/w-3-$r | awk -F, '{printf "%s %9.1f %9.1f %9.1f  %6.3f %6.3f\n",$1,$2,$3,$4,$3/$2,$4/$2}' | sort -t'|' -n -k1,1 -k2,2 -k3,3 -k4,4
  done
} > $OUT/waves.txt 2>&1
cat $OUT/waves.txt
