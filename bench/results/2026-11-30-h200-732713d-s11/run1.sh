#!/usr/bin/env bash
# session 11, device call 1: light row tiles (a request's last tile of at most 32 rows) in a
# launch of their own with the skipping instance and longer splits. Working tree (p70):
# GPU tests, multi-stream test, golden, memcheck and racecheck of the many-splits test; the
# same tests with the light launch's trailing wait removed (nowait: must fail); then bench
# A/B: base (732713d) against light cost 55/70/85/100 percent, two rounds.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call1
tar -xJf $C/bins.tar.xz -C $C
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
{ echo "# test_cuda_gpu"; timeout 200 $C/test_cuda_gpu 2>&1 | grep -E "^\[  |base seed|cases passed|FAIL|ERROR|error|seed" | head -40
  echo "# test_cuda_streams_gpu"; timeout 90 $C/test_cuda_streams_gpu 2>&1 | grep -E "^\[  |FAIL|ERROR|error" | head -20
  echo "# golden"; timeout 60 $C/mlav-p70 check --backend cuda golden/*.safetensors 2>&1 | tail -1
  echo "# memcheck, many splits + graph"; MLAV_TEST_FILTER="test_cuda_[mg][ar]*" timeout 240 compute-sanitizer --tool memcheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -3; echo "rc=$?"
  echo "# racecheck, many splits"; MLAV_TEST_FILTER=test_cuda_many_splits timeout 200 compute-sanitizer --tool racecheck --error-exitcode 99 $C/test_cuda_gpu 2>&1 | tail -2; echo "rc=$?"
  echo "# nowait mutation (must fail), 3 runs of grid + many splits + graph"
  for i in 1 2 3; do MLAV_TEST_FILTER="test_cuda_[gm]*" timeout 120 $C/test_cuda_gpu-nowait 2>&1 | grep -E "^\[  (PASSED|FAILED) |rel|fail" | head -4; done
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
j() { awk -F, 'NR>1 {print $3"|"$4"|"$5"|"$6","$9}' "$@" | sort; }
V="base p70 p55 p85 p100"
{ for r in 1 2; do [ $r = 2 ] && [ $SECONDS -gt 420 ] && { echo "round 2 skipped at ${SECONDS}s"; break; }
  for v in $V; do
    timeout 90 $C/mlav-$v bench --backend cuda --heads 16 --qlen 9,33 --prefix 1024,4096,16384,65536,131072 --csv /tmp/a.csv > /dev/null 2>&1 || echo "a $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --batch 8 --heads 16 --qlen 9 --prefix 4096,32768 --csv /tmp/b.csv > /dev/null 2>&1 || echo "b $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 8 --qlen 9,33 --prefix 4096,65536 --csv /tmp/c.csv > /dev/null 2>&1 || echo "c $v failed"
    timeout 60 $C/mlav-$v bench --backend cuda --heads 16,64 --qlen 1,9 --prefix 256,65536 --csv /tmp/d.csv > /dev/null 2>&1 || echo "d $v failed"
    j /tmp/a.csv <(tail -n +2 /tmp/b.csv) <(tail -n +2 /tmp/c.csv) <(tail -n +2 /tmp/d.csv) > /tmp/v-$v-$r
  done; echo "round $r done at $(date +%T)"; done
  for r in 1 2; do [ -f /tmp/v-p100-$r ] || continue
    echo "# round $r: batch|heads|q_len|prefix, us: base (732713d), p70, p55, p85, p100; each / base"
    join -t, /tmp/v-base-$r /tmp/v-p70-$r | join -t, - /tmp/v-p55-$r | join -t, - /tmp/v-p85-$r | join -t, - /tmp/v-p100-$r | awk -F, '{printf "%-18s %8.1f %8.1f %8.1f %8.1f %8.1f   %6.3f %6.3f %6.3f %6.3f\n",$1,$2,$3,$4,$5,$6,$3/$2,$4/$2,$5/$2,$6/$2}' | sort -t'|' -n -k1,1 -k2,2 -k3,3 -k4,4
  done
} > $OUT/light-ab.txt 2>&1
cat $OUT/light-ab.txt
