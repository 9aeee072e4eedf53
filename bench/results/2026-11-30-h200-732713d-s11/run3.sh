#!/usr/bin/env bash
# session 11, device call 3: the tree to commit (732713d's kernels, test_cuda_gpu with a poisoned
# workspace and five new cases): GPU tests, multi-stream test, golden; memcheck, racecheck,
# synccheck of the many-splits test; the first racecheck reports of call 2's key-groups build;
# then the L2 question for q_len 1: --l2 warm against flush where the KV fits the L2.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call3
tar -xJf $C/bins.tar.xz -C $C
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
{ echo "# test_cuda_gpu"; timeout 240 $C/test_cuda_gpu > /tmp/t.txt 2>&1; echo "rc=$?"
  grep -E "^\[  |base seed|cases passed|FAIL|ERROR|error|fail" /tmp/t.txt | head -40
  grep -E "many|ok cuda  " /tmp/t.txt | grep -E "h=(8|16),.*(12000|5000|8191)" | head -12
  echo "# test_cuda_streams_gpu"; timeout 90 $C/test_cuda_streams_gpu > /tmp/s.txt 2>&1; echo "rc=$?"; grep -E "^\[  |FAIL|ERROR|error" /tmp/s.txt | head -20
  echo "# golden"; timeout 60 $C/mlav-head check --backend cuda golden/*.safetensors 2>&1 | tail -1
  for tool in memcheck racecheck synccheck; do
    echo "# $tool, many splits"; MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool $tool --error-exitcode 99 $C/test_cuda_gpu > /tmp/c.txt 2>&1; echo "rc=$?"; grep -E "^\[  |SUMMARY|ERROR" /tmp/c.txt | head -8
  done
  echo "# racecheck of call 2's key-groups build, many splits: the first reports"
  MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool racecheck --print-limit 6 $C/test_cuda_gpu-kg > /tmp/k.txt 2>&1; echo "rc=$?"
  grep -E "Error|Write|Read|at |by thread|SUMMARY|bytes" /tmp/k.txt | head -60
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
{ for l2 in flush warm; do
    timeout 90 $C/mlav-head bench --backend cuda --l2 $l2 --heads 16,64 --qlen 1 --prefix 4096,16384,32768,131072 --csv /tmp/l-$l2.csv > /dev/null 2>&1 || echo "$l2 failed"
    timeout 90 $C/mlav-head bench --backend cuda --l2 $l2 --heads 16,64 --qlen 1 --prefix 16384,131072 --page-size 64 --csv /tmp/p-$l2.csv > /dev/null 2>&1 || echo "$l2 p64 failed"
  done
  j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6"|"$7","$9","$11}' "$@" | sort -u; }
  echo "# batch|heads|q_len|prefix|page_size, us and GB/s: L2 flushed, L2 warm; warm / flushed"
  join -t, <(j /tmp/l-flush.csv <(tail -n +2 /tmp/p-flush.csv)) <(j /tmp/l-warm.csv <(tail -n +2 /tmp/p-warm.csv)) | awk -F, '{printf "%-20s %8.1f %7.0f   %8.1f %7.0f   %6.3f\n",$1,$2,$3,$4,$5,$4/$2}' | sort -t'|' -n -k2,2 -k4,4 -k5,5
} > $OUT/l2.txt 2>&1
cat $OUT/l2.txt
