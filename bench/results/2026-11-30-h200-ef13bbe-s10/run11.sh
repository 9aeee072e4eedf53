#!/usr/bin/env bash
# session 10, device call 11: da348f4 (+ inert EXP hooks): GPU tests, multi-stream test, golden;
# then the row combine's warps per block (2, 4 = da348f4, 8) and the combine without PDL
# (EXP_NOPDL on rw4), two rounds
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call11
{ echo "# test_cuda_gpu"; timeout 150 $C/test_cuda_gpu 2>&1 | grep -E "^\[  |base seed|cases passed|FAIL|ERROR|error" | head -40
  echo "# test_cuda_streams_gpu"; timeout 90 $C/test_cuda_streams_gpu 2>&1 | grep -E "^\[  |FAIL|ERROR|error" | head -20
  echo "# golden"; timeout 60 $C/mlav-rw4 check --backend cuda golden/*.safetensors 2>&1 | tail -1
  echo "# racecheck, many splits"; MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool racecheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -2; echo "rc=$?"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort; }
{ for r in 1 2; do for v in rw4 nopdl rw2 rw8; do
    b=$v; e=""; [ $v = nopdl ] && { b=rw4; e="EXP_NOPDL=1"; }
    env $e timeout 60 $C/mlav-$b bench --backend cuda --heads 64 --qlen 1,9,33 --prefix 256,1024,4096 --csv /tmp/a.csv > /dev/null 2>&1 || echo "a $v failed"
    env $e timeout 60 $C/mlav-$b bench --backend cuda --heads 16,128 --qlen 9,33 --prefix 256,1024 --csv /tmp/b.csv > /dev/null 2>&1 || echo "b $v failed"
    env $e timeout 60 $C/mlav-$b bench --backend cuda --heads 64 --qlen 9 --prefix 16384,131072 --csv /tmp/c.csv > /dev/null 2>&1 || echo "c $v failed"
    env $e timeout 60 $C/mlav-$b bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 4096 --csv /tmp/d.csv > /dev/null 2>&1 || echo "d $v failed"
    j /tmp/a.csv <(tail -n +2 /tmp/b.csv) <(tail -n +2 /tmp/c.csv) <(tail -n +2 /tmp/d.csv) > /tmp/v-$v-$r
  done; done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: rw4 (da348f4), nopdl, rw2, rw8; each / rw4"
    join -t, /tmp/v-rw4-$r /tmp/v-nopdl-$r | join -t, - /tmp/v-rw2-$r | join -t, - /tmp/v-rw8-$r | awk -F, '{printf "%s %8.1f %8.1f %8.1f %8.1f   %6.3f %6.3f %6.3f\n",$1,$2,$3,$4,$5,$3/$2,$4/$2,$5/$2}' | sort -t'|' -n -k1,1 -k2,2 -k3,3 -k4,4
  done
} > $OUT/rowwarps-nopdl.txt 2>&1
cat $OUT/rowwarps-nopdl.txt
