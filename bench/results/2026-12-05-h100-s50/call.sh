#!/usr/bin/env bash
# Session 50's one call (HEAD): session 49's two prepared calls merged by value, since machine
# starts are scarce: the keys kernel's own test against the fp64 oracle; if it passed, one
# harness round of the BF16 cache, the FP8 cache by the rules and the FP8 cache with the keys
# kernel (B {1,16} x H {8,16} x q_len {1,2} x {4k,32k,131k}); memcheck on its cases; the FP8 tests
# that add it; the golden bundles and test_fp8 with it opted in; racecheck; the CLI's engine path
# with and without it. Each step capped by what is left of CAP (570) s. Logs tarred into $OUT/o.tgz.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o; mkdir -p $O
trap 'tar -czf $OUT/o.tgz -C /tmp o' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
B=$PWD/build-s50
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt 2>&1
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
  && cmake --build $B -j16 --target mlaverify mlaverify_cli test_sm90_gpu test_fp8 test_golden >> $O/build.log 2>&1
echo "build rc=$?"; el built
run() { # name seconds command...: its log in $O/name.log, its rc and last lines here
  local n=$1 s; s=$(lim $2); shift 2
  timeout --kill-after=5 $s "$@" > $O/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc (cap $s s)"; grep -E "FAIL|PASSED|FAILED|ERROR SUMMARY" $O/$n.log | head -8
  el $n; return $rc
}
run keys 150 env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu; keys_rc=$?
echo "keys runs ok: $(grep -c '^  keys .*: ok' $O/keys.log)"
grep -B2 -A6 -m3 "FAIL\|mismatch\|error" $O/keys.log | head -40
if [ $keys_rc -eq 0 ]; then
  grep -q fp8keys .peer/flashmla/bench_flashmla.py || (cd .peer/flashmla && patch -p1 -s < ../../bench/plans/s49/harness-fp8keys.patch) \
    || echo "harness patch failed"
  MLAVERIFY_LIBRARY=$B/libmlaverify.so PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1 \
    MLAV_COMMIT=${COMMIT:-head} timeout $(lim 140) python3 .peer/flashmla/bench_flashmla.py --out $O/r1 \
    --libs mlaverify --variants=fp8,fp8keys --batch 1,16 --heads 8,16 --qlen 1,2 \
    --prefix 4096,32768,131072 --copy-gib 0.25 --mm-n 1024 --ref-requests first,last --budget 115 \
    --rep-ms 60 > $O/r1.log 2>&1
  echo "harness rc=$?"; tail -1 $O/r1.log | cut -c1-200; grep -E "geomean" $O/r1/variants.md
  el harness
fi
run memcheck 70 env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
  compute-sanitizer --tool memcheck --error-exitcode 99 $B/tests/test_sm90_gpu
run fp8 90 env MLAV_TEST_FILTER='test_sm90_fp8_*' MLAV_SM90_CASES=8 $B/tests/test_sm90_gpu
echo "keys runs ok: $(grep -c '^  keys .*: ok' $O/fp8.log)"
run golden 40 env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=keys $B/tests/test_golden
run test_fp8 50 env MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=keys MLAV_TEST_FILTER='*(cuda)' $B/tests/test_fp8
run racecheck 70 env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
  compute-sanitizer --tool racecheck --error-exitcode 99 $B/tests/test_sm90_gpu
for k in keys ""; do
  n=cli-${k:-rule}
  MLAV_SM90_KERNEL=$k timeout $(lim 40) $B/mlaverify bench --backend cuda --heads 8,16 --qlen 1 \
    --prefix 4096,32768,131072 --kv-dtype bf16,fp8 --engine 1.5 --csv $O/$n.csv > $O/$n.log 2>&1
  echo "$n rc=$?"; tail -14 $O/$n.log
done
el done
