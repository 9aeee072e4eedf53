#!/usr/bin/env bash
# session 11, device call 2: the key-groups instance (plans whose every request has at most 32
# rows: both warp groups share the rows and take alternate KV tiles). Working tree (kg): GPU
# tests, multi-stream test, golden; memcheck, racecheck, synccheck of the many-splits test
# (key-group cases) and memcheck of golden; then bench A/B against 732713d (base), two rounds.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call2
tar -xJf $C/bins.tar.xz -C $C
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
{ echo "# test_cuda_gpu"; timeout 240 $C/test_cuda_gpu > /tmp/t.txt 2>&1; echo "rc=$?"
  grep -E "^\[  |base seed|cases passed|FAIL|ERROR|error|fail" /tmp/t.txt | head -60
  grep -E "ok cuda  " /tmp/t.txt | grep -E "h=(8|16|32)," | head -30
  echo "# test_cuda_streams_gpu"; timeout 90 $C/test_cuda_streams_gpu > /tmp/s.txt 2>&1; echo "rc=$?"; grep -E "^\[  |FAIL|ERROR|error" /tmp/s.txt | head -20
  echo "# golden"; timeout 60 $C/mlav-kg check --backend cuda golden/*.safetensors 2>&1 | tail -1
  for tool in memcheck racecheck synccheck; do
    echo "# $tool, many splits"; MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool $tool --error-exitcode 99 $C/test_cuda_gpu > /tmp/c.txt 2>&1; echo "rc=$?"; grep -E "^\[  |SUMMARY|ERROR" /tmp/c.txt | head -8
  done
  echo "# memcheck, golden"; timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 $C/mlav-kg check --backend cuda golden/*.safetensors > /tmp/g.txt 2>&1; echo "rc=$?"; tail -3 /tmp/g.txt
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort -u; }
{ for r in 1 2; do for v in base kg; do
    timeout 90 $C/mlav-$v bench --backend cuda --heads 16 --qlen 1,2 --prefix 256,1024,4096,16384,65536,131072 --csv /tmp/a.csv > /dev/null 2>&1 || echo "a $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 8 --qlen 1,4 --prefix 1024,16384,131072 --csv /tmp/b.csv > /dev/null 2>&1 || echo "b $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 32 --qlen 1 --prefix 4096,65536 --csv /tmp/c.csv > /dev/null 2>&1 || echo "c $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --batch 8 --heads 16 --qlen 1 --prefix 4096,32768 --csv /tmp/d.csv > /dev/null 2>&1 || echo "d $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 64 --qlen 9 --prefix 256,131072 --csv /tmp/e.csv > /dev/null 2>&1 || echo "e $v failed"
    j /tmp/a.csv <(tail -n +2 /tmp/b.csv) <(tail -n +2 /tmp/c.csv) <(tail -n +2 /tmp/d.csv) <(tail -n +2 /tmp/e.csv) > /tmp/v-$v-$r
    cp /tmp/a.csv $OUT/kg-a-$v-$r.csv 2>/dev/null
  done; echo "round $r done at ${SECONDS}s"; done
  for r in 1 2; do
    echo "# round $r: batch|heads|q_len|prefix, us: base (732713d), kg; kg / base"
    join -t, /tmp/v-base-$r /tmp/v-kg-$r | awk -F, '{printf "%-18s %8.1f %8.1f   %6.3f\n",$1,$2,$3,$3/$2}' | sort -t'|' -n -k1,1 -k2,2 -k3,3 -k4,4
  done
} > $OUT/kg-ab.txt 2>&1
cat $OUT/kg-ab.txt
