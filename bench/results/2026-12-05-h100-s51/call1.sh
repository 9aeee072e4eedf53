#!/usr/bin/env bash
# (As run in session 51. The patch is at 039be07..de68416 in git: `git show de68416`.)
# Session 51 call 1 (main, then main + page-async.patch): the keys kernel's page ids by cp.async
# (the patch), first correct, then timed against main. main's tree is copied before the patch is
# applied (the device copy's .git can be stale, so no git archive there). Each step capped by what
# is left of CAP (570) s; logs tarred into $OUT/o.tgz.
#   1. the patched tree: test_sm90_keys, then memcheck and racecheck on 2 cases a group;
#   2. bench/ab.sh main against the patched tree, 3 rounds, B 16 then B 1, H {8, 16} x q_len {1, 2}
#      x {32k, 131k}, BF16 and FP8 caches (the keys kernel takes the FP8 rows of at most 16 rows;
#      H 16, q_len 2, the seesaw's, is the control; the BF16 rows give the speed ratio).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o; mkdir -p $O
trap 'tar -czf $OUT/o.tgz -C /tmp o' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt 2>&1
rm -rf /tmp/base && mkdir /tmp/base
tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/base
patch -p1 -s < bench/plans/s51/page-async.patch || { echo "patch failed"; exit 1; }
B=$PWD/build-s51
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
  && cmake --build $B -j16 --target test_sm90_gpu >> $O/build.log 2>&1
echo "build rc=$?"; grep -E "spill|error" $O/build.log | head -5; el built
run() { local n=$1 s; s=$(lim $2); shift 2
  timeout --kill-after=5 $s "$@" > $O/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc (cap $s s)"; grep -E "FAIL|PASSED|FAILED|ERROR SUMMARY" $O/$n.log | head -6; el $n; return $rc; }
run keys 120 env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu || exit 1
echo "keys runs ok: $(grep -c '^  keys .*: ok' $O/keys.log)"
for tool in memcheck racecheck; do
  run san-$tool 60 env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu
done
for b in 16 1; do # --batch takes one value; the second run finds both builds made
  mkdir -p $O/ab-b$b
  OUT=$O/ab-b$b ROUNDS=3 timeout $(lim 200) bash bench/ab.sh /tmp/base --backend cuda --batch $b \
    --heads 8,16 --qlen 1,2 --prefix 32768,131072 --kv-dtype bf16,fp8 > $O/ab-b$b.log 2>&1
  echo "ab B $b rc=$?"; tail -24 $O/ab-b$b/ab.txt 2>/dev/null || tail -20 $O/ab-b$b.log
  el ab-b$b
done
