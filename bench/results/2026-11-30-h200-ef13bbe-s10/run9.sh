#!/usr/bin/env bash
# session 10, device call 9: which split-kernel instance for partly filled row tiles. mlav-ag is
# 9e57f42 with EXP_ALLGROUPS overriding the plan's choice (1 = every group computes, 0 = idle
# groups skip); unset = the plan's rule (max q_len x H > 32 -> 1)
cd "$(dirname "$0")/.."
C=build-call9
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort; }
{ for r in 1 2; do for a in 1 0; do
    env EXP_ALLGROUPS=$a timeout 60 $C/mlav-ag bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 4096,32768 --csv /tmp/a.csv > /dev/null 2>&1 || echo "a $a failed"
    env EXP_ALLGROUPS=$a timeout 60 $C/mlav-ag bench --backend cuda --heads 16 --qlen 9,33 --prefix 1024,4096,16384,65536 --csv /tmp/b.csv > /dev/null 2>&1 || echo "b $a failed"
    env EXP_ALLGROUPS=$a timeout 60 $C/mlav-ag bench --backend cuda --heads 8 --qlen 9,33 --prefix 4096,65536 --csv /tmp/c.csv > /dev/null 2>&1 || echo "c $a failed"
    env EXP_ALLGROUPS=$a timeout 60 $C/mlav-ag bench --backend cuda --batch 4 --heads 8 --qlen 9 --prefix 16384 --csv /tmp/d.csv > /dev/null 2>&1 || echo "d $a failed"
    j /tmp/a.csv <(tail -n +2 /tmp/b.csv) <(tail -n +2 /tmp/c.csv) <(tail -n +2 /tmp/d.csv) > /tmp/g-$a-$r
  done; done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: all groups, skipping; skipping/all"
    join -t, /tmp/g-1-$r /tmp/g-0-$r | awk -F, '{printf "%s %9.1f %9.1f  %6.3f\n",$1,$2,$3,$3/$2}' | sort -t'|' -n -k1,1 -k2,2 -k3,3 -k4,4
  done
} > $OUT/allgroups.txt 2>&1
cat $OUT/allgroups.txt
