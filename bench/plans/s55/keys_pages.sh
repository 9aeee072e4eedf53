#!/usr/bin/env bash
# The landed keys kernel's bulk copies (7b7e8d2) where no GPU has run them: test_sm90_keys's page
# sizes 16, 128 and 256 (added after session 53's run), then test_fp8, then memcheck and initcheck
# of test_sm90_keys (2 cases a group; initcheck has not run on the keys kernel since 7b7e8d2).
# For a call too short for the suite's tests part (~375 s). Each step is capped by what is left
# of CAP (420) s; logs in $OUT/o.tgz.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { # $1 s, or what is left of CAP if less (at least 5)
  local l=$(( ${CAP:-420} - ($(date +%s) - t0) ))
  [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l
}
O=/tmp/o; rm -rf $O; mkdir -p $O
trap 'tar -czf $OUT/o.tgz -C /tmp o' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv \
  > $O/machine.txt 2>&1
B=$PWD/build-s55
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
  && timeout $(lim 240) cmake --build $B -j16 --target test_sm90_gpu test_fp8 >> $O/build.log 2>&1
rc=$?; echo "build rc=$rc"; grep -E "spill|error" $O/build.log | head -5; el built
[ $rc = 0 ] || exit 1
timeout --kill-after=5 $(lim 150) env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu \
  > $O/keys.log 2>&1
echo "keys rc=$? runs ok: $(grep -c '^  keys .*: ok' $O/keys.log)"
grep -E "FAIL" $O/keys.log | head -5; tail -3 $O/keys.log; el keys
(cd $B && timeout --kill-after=5 $(lim 120) ctest -R '^test_fp8$' --output-on-failure) \
  > $O/fp8.log 2>&1
echo "test_fp8 rc=$?"; grep -E "tests passed|Failed" $O/fp8.log | tail -2; el fp8
for tool in memcheck initcheck; do
  timeout --kill-after=5 $(lim 60) env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu \
    > $O/san-$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY" $O/san-$tool.log | sort | uniq -c
done
el sanitizers
