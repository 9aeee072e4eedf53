#!/usr/bin/env bash
# Session 53 call 1 (main): the keys kernel's shared-memory wavefronts (session 52's profile at
# page_size 64: 25.2 M of 68.0 M beyond the ideal at 16 rows; docs/PERFORMANCE.md#hopper).
#   1. main + wavefronts.patch (row-page.patch's one page id a row; whole tiles inside one page
#      copied flat; the slices' exchange 16 bytes a lane apart): build, test_sm90_keys, memcheck
#      and racecheck on it (2 cases a group: the row's other threads now read the id its first
#      thread copied, across the block barrier);
#   2. bench/ab.sh main against it, 3 rounds, FP8 cache, page_size 64 then 1, B 16, H {8, 16} x
#      q_len {1, 2} x {32k, 131k} (H 16, q_len 2 is the seesaw's: the control);
#   3. the same at page_size 64 with main + row-page.patch as the base (the flat tiles' and the
#      exchange's share);
#   4. Nsight Compute on the patched keys kernel at page_size 64, B 16, H 16, q_len 1, 131k: its
#      wavefronts and stalls against session 52's (68.0 M, 25.2 M excessive, 6.4 cycles an issue);
#   5. main's FP8 family rule at page_size 1 (B 1 and 16, H 8 and 16, q_len 1, 4k and 32k): the
#      keys kernel against the legal family (session 52 timed the rule's points at page_size 64).
# Each step capped by what is left of CAP (570) s; a failed test stops the call; everything tarred
# into $OUT/o.tgz; the patch comes off at the end.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o; rm -rf $O; mkdir -p $O
trap 'tar -czf $OUT/o.tgz -C /tmp o; [ -f $O/patched ] && patch -R -p1 -s < bench/plans/s53/wavefronts.patch' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt 2>&1
for t in base rowpage; do
  rm -rf /tmp/$t && mkdir /tmp/$t
  tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/$t
done
(cd /tmp/rowpage && patch -p1 -s < bench/plans/s53/row-page.patch) || { echo "row-page failed"; exit 1; }
patch -p1 -s < bench/plans/s53/wavefronts.patch || { echo "patch failed"; exit 1; }
touch $O/patched
B=$PWD/build-s53
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
for tool in memcheck racecheck; do
  timeout --kill-after=5 $(lim 45) env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu > $O/san-$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $O/san-$tool.log | sort | uniq -c
done
el sanitizers
ab /tmp/base 1 p1
ab /tmp/rowpage 64 flat-p64 # last: the profile attributes the wavefronts too
# the family rule at page_size 1 (its points were timed at page_size 64): main's keys kernel
# against the legal family's FP8 path (MLAV_SM90_KERNEL=seesaw turns the keys kernel off)
M0=$PWD/build-ab-base-base/mlaverify
for e in rule seesaw; do
  [ -x "$M0" ] && for b in 1 16; do
    MLAV_SM90_KERNEL=$e timeout $(lim 30) $M0 bench --backend cuda --batch $b --heads 8,16 --qlen 1 \
      --prefix 4096,32768 --page-size 1 --kv-dtype fp8 --reps 100 --max-seconds 1 2>&1 \
      | grep -E '^ +[0-9]+ ' | sed "s/^/$e B$b /" | tee -a $O/rule-p1.txt
  done
done
el rule-p1
el done
