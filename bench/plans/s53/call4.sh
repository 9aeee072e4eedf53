#!/usr/bin/env bash
# Session 53 call 4 (main): the keys kernel's KV tiles by bulk copies (bulk.patch: wavefronts.patch
# with the tiles' cp.async copies replaced by cp.async.bulk on a barrier a stage: a tile inside
# one page one copy by thread 0, else a row's 576 bytes by its first thread, rows past kv_end
# zeroed by stores). Session 52's profile (page_size 64, B 16, H 16, q_len 1, 131k, H100): the
# copies 9.4 M of 68.0 M shared-memory wavefronts beyond the ideal, and the first reuse of their
# address registers 7.3% of the stall samples (a load/store unit that holds them).
#   1. build, test_sm90_keys, memcheck, racecheck and synccheck on it (2 cases a group);
#   2. bench/ab.sh main against it, 3 rounds, FP8 cache, page_size 64 then 1, B 16, H {8, 16} x
#      q_len {1, 2} x {32k, 131k} (H 16, q_len 2 is the seesaw's: the control);
#   3. Nsight Compute on it at page_size 64, B 16, H 16, q_len 1, 131k.
# Predicted: 0.85-0.93x the time at page_size 64 (0.78 -> 0.85-0.9 of the copy rate at 16 rows),
# 0.93-0.98x at page_size 1 (a copy a row: the row path), 1.00x at 32 rows.
# Each step capped by what is left of CAP (570) s; a failed test stops the call; everything tarred
# into $OUT/o.tgz; the patch comes off at the end.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o; rm -rf $O; mkdir -p $O
trap 'tar -czf $OUT/o.tgz -C /tmp o; [ -f $O/patched ] && patch -R -p1 -s < bench/plans/s53/bulk.patch' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt 2>&1
rm -rf /tmp/base && mkdir /tmp/base
tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/base
patch -p1 -s < bench/plans/s53/bulk.patch || { echo "patch failed"; exit 1; }
touch $O/patched
B=$PWD/build-s53 # call 1's, if it ran: an incremental build
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
  && cmake --build $B -j16 --target test_sm90_gpu >> $O/build.log 2>&1
echo "build rc=$?"; grep -E "spill|error" $O/build.log | head -5; el built
timeout --kill-after=5 $(lim 120) env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu > $O/keys.log 2>&1
echo "keys rc=$? runs ok: $(grep -c '^  keys .*: ok' $O/keys.log)"; grep -E "FAIL|PASSED" $O/keys.log | head -3
el keys
grep -q "FAILED" $O/keys.log && { echo "keys failed: no A/B (the log says where)"; exit 1; }
ab() { # $1 base tree, $2 page size, $3 name
  mkdir -p $O/ab-$3
  OUT=$O/ab-$3 ROUNDS=3 timeout $(lim 150) bash bench/ab.sh $1 --backend cuda --batch 16 \
    --heads 8,16 --qlen 1,2 --prefix 32768,131072 --kv-dtype fp8 --page-size $2 > $O/ab-$3.log 2>&1
  echo "ab $3 rc=$?"; tail -14 $O/ab-$3/ab.txt 2>/dev/null || tail -20 $O/ab-$3.log
  el ab-$3
}
ab /tmp/base 64 p64
M=$(ls -d $PWD/build-ab-new*/mlaverify 2>/dev/null | head -1)
if [ -x "$M" ]; then
  timeout $(lim 60) ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' --import-source no \
    -k regex:keys -c 1 -f -o /tmp/keys16 $M bench --backend cuda --batch 16 --heads 16 --qlen 1 \
    --prefix 131072 --kv-dtype fp8 --page-size 64 --reps 3 > $O/ncu-run-h16.log 2>&1
  echo "ncu rc=$?"
  ncu -i /tmp/keys16.ncu-rep --page details > $O/ncu-h16.txt 2>&1
  ncu -i /tmp/keys16.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $O/ncu-sass-h16.csv.gz
  grep -E "Duration|Warp Cycles Per Issued|excessive wavefronts" $O/ncu-h16.txt | head -4
fi
el ncu
for tool in memcheck racecheck synccheck; do
  timeout --kill-after=5 $(lim 45) env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu > $O/san-$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $O/san-$tool.log | sort | uniq -c
done
el sanitizers
ab /tmp/base 1 p1
el done
