#!/usr/bin/env bash
# session 11, device call 5: S summed in two accumulator sets (even and odd k-steps: chains of 5
# and 4 MMAs instead of 9), against 4586b25 (head: 732713d's kernels); the loop bodies of both
# (cuobjdump + bench/sass_loops.py: HMMA/LDSM/LDL per body), golden with dual, A/B two rounds.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call5
tar -xJf $C/bins.tar.xz -C $C
{ for v in head dual; do echo "# $v"; cuobjdump -sass $C/mlav-$v | python3 bench/sass_loops.py | grep flash_verify; done
  echo "# golden, dual"; timeout 60 $C/mlav-dual check --backend cuda golden/*.safetensors 2>&1 | tail -1
} > $OUT/loops.txt 2>&1
cat $OUT/loops.txt
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort -u; }
{ for r in 1 2; do for v in head dual; do
    timeout 90 $C/mlav-$v bench --backend cuda --heads 64 --qlen 1,9,33 --prefix 256,4096,16384,131072 --csv /tmp/a.csv > /dev/null 2>&1 || echo "a $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 16,128 --qlen 1,33 --prefix 65536 --csv /tmp/b.csv > /dev/null 2>&1 || echo "b $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 32768 --csv /tmp/c.csv > /dev/null 2>&1 || echo "c $v failed"
    j /tmp/a.csv <(tail -n +2 /tmp/b.csv) <(tail -n +2 /tmp/c.csv) > /tmp/v-$v-$r
  done; echo "round $r done at ${SECONDS}s"; done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: head (4586b25), dual; dual / head"
    join -t, /tmp/v-head-$r /tmp/v-dual-$r | awk -F, '{printf "%-18s %8.1f %8.1f   %6.3f\n",$1,$2,$3,$3/$2}' | sort -t'|' -n -k1,1 -k2,2 -k3,3 -k4,4
  done
} > $OUT/dual-ab.txt 2>&1
cat $OUT/dual-ab.txt
