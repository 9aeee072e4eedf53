#!/usr/bin/env bash
# session 10, device call 7: up to 256 splits (working tree on 3167bca): GPU tests, multi-stream
# test, golden, memcheck + racecheck of the non-finite test, SASS loop bodies of each instance,
# then bench A/B against 3167bca ("base"), two rounds, builds interleaved
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call7
{ echo "# test_cuda_gpu (new)"; timeout 150 $C/test_cuda_gpu 2>&1 | grep -E "^\[  |base seed|cases passed|FAIL|ERROR|error|fused" | head -40
  echo "# test_cuda_streams_gpu (new)"; timeout 90 $C/test_cuda_streams_gpu 2>&1 | grep -E "^\[  |FAIL|ERROR|error" | head -20
  echo "# golden (new)"; timeout 60 $C/mlav-new check --backend cuda golden/*.safetensors 2>&1 | tail -1
  echo "# memcheck, golden"; timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 $C/mlav-new check --backend cuda golden/*.safetensors 2>&1 | tail -2; echo "rc=$?"
  echo "# racecheck, many splits"; MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool racecheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -3; echo "rc=$?"
  echo "# memcheck, grid test"; MLAV_TEST_FILTER=test_cuda_grid timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -3; echo "rc=$?"
  echo "# initcheck, graph test"; MLAV_TEST_FILTER=test_cuda_graph timeout 100 compute-sanitizer --tool initcheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -3; echo "rc=$?"
  echo "# racecheck, non-finite test"; MLAV_TEST_FILTER=test_cuda_nonfinite_hidden_draft timeout 150 compute-sanitizer --tool racecheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -3; echo "rc=$?"
} > $OUT/tests-new.txt 2>&1
cat $OUT/tests-new.txt
{ echo "# bench A/B: mlaverify bench --backend cuda, BF16 page 1; two rounds, builds interleaved"
  for r in 1 2; do for v in base new; do
    timeout 120 $C/mlav-$v bench --backend cuda --heads 64 --qlen 1,9,33 --prefix 256,1024,4096,16384,65536,131072 --csv /tmp/a-$v-$r.csv > /dev/null 2>&1 || echo "bench $v $r failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 16,128 --qlen 1,9,33 --prefix 256,1024,4096,16384 --csv /tmp/b-$v-$r.csv > /dev/null 2>&1 || echo "bench2 $v $r failed"
    timeout 60 $C/mlav-$v bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 4096,32768 --csv /tmp/c-$v-$r.csv > /dev/null 2>&1 || echo "bench3 $v $r failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 128 --qlen 9,33 --prefix 131072 --csv /tmp/d-$v-$r.csv > /dev/null 2>&1 || echo "bench4 $v $r failed"
    cat /tmp/a-$v-$r.csv <(tail -n +2 /tmp/b-$v-$r.csv) <(tail -n +2 /tmp/c-$v-$r.csv) <(tail -n +2 /tmp/d-$v-$r.csv) | awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' | sort > /tmp/j-$v-$r
  done; done
  echo "# round batch heads q_len prefix  base(3167bca) new (us)  new/base"
  for r in 1 2; do
    join -t, /tmp/j-base-$r /tmp/j-new-$r | awk -F'[|,]' -v r=$r '{printf "r%d %2s %4s %3s %7s %8.1f %8.1f  %6.3f\n",r,$1,$2,$3,$4,$5,$6,$6/$5}' | sort -n -k2,2 -k3,3 -k4,4 -k5,5
  done
} > $OUT/ab-splits.txt 2>&1
cat $OUT/ab-splits.txt
