#!/usr/bin/env bash
# Session 52 call 1 (main): what holds the keys kernel's 16-row instance at 0.78-0.80 of the copy
# rate, and one guess at it.
#   1. main + s-chains.patch (S^T's 18 k16 steps as two chains of 9): build, test_sm90_keys;
#   2. bench/ab.sh main against it, 3 rounds, FP8 cache, page_size 64 then 1, B 16, H {8, 16} x
#      q_len {1, 2} x {32k, 131k} (H 16, q_len 2 is the seesaw's: the control);
#   3. Nsight Compute on main's keys kernel at page_size 64, B 16, q_len 1, 131k, H 16 and H 8:
#      every stall reason per issued instruction, and the per-instruction SASS with its stall
#      samples (the source page), which the checkout cannot disassemble without cuobjdump;
#   4. `mlaverify bench --l2 dirty` against the default flush at B 16, 4096 (session 48's item 3);
#   5. the engine path (`--engine 1` and `1.5`) over an FP8 cache at q_len 1, 131k.
# Each step capped by what is left of CAP (570) s; everything tarred into $OUT/o.tgz.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o; rm -rf $O; mkdir -p $O
# the patch comes off at the end, so that a later call on this machine starts from main
trap 'tar -czf $OUT/o.tgz -C /tmp o; [ -f $O/patched ] && patch -R -p1 -s < bench/plans/s52/s-chains.patch' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt 2>&1
rm -rf /tmp/base && mkdir /tmp/base
tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/base
patch -p1 -s < bench/plans/s52/s-chains.patch || { echo "patch failed"; exit 1; }
touch $O/patched
B=$PWD/build-s52
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
  && cmake --build $B -j16 --target test_sm90_gpu >> $O/build.log 2>&1
echo "build rc=$?"; grep -E "spill|error" $O/build.log | head -5; el built
timeout --kill-after=5 $(lim 120) env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu > $O/keys.log 2>&1
echo "keys rc=$? runs ok: $(grep -c '^  keys .*: ok' $O/keys.log)"; grep -E "FAIL|PASSED" $O/keys.log | head -3
el keys
for pg in 64 1; do
  mkdir -p $O/ab-p$pg
  OUT=$O/ab-p$pg ROUNDS=3 timeout $(lim 150) bash bench/ab.sh /tmp/base --backend cuda --batch 16 \
    --heads 8,16 --qlen 1,2 --prefix 32768,131072 --kv-dtype fp8 --page-size $pg > $O/ab-p$pg.log 2>&1
  echo "ab page $pg rc=$?"; tail -14 $O/ab-p$pg/ab.txt 2>/dev/null || tail -20 $O/ab-p$pg.log
  el ab-p$pg
done
M=$PWD/build-ab-base-base/mlaverify
stalls='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
for h in 16 8; do
  timeout $(lim 80) ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section SourceCounters --section InstructionStats --metrics "$stalls" --import-source no \
    -k regex:keys -c 1 -f -o /tmp/keys$h $M bench --backend cuda --batch 16 --heads $h --qlen 1 \
    --prefix 131072 --kv-dtype fp8 --page-size 64 --reps 3 > $O/ncu-run-h$h.log 2>&1
  echo "ncu h$h rc=$?"
  ncu -i /tmp/keys$h.ncu-rep --page details > $O/ncu-h$h.txt 2>&1
  ncu -i /tmp/keys$h.ncu-rep --page raw --csv > $O/ncu-raw-h$h.csv 2>&1
  ncu -i /tmp/keys$h.ncu-rep --page source --csv --print-source sass > $O/ncu-sass-h$h.csv 2>&1 \
    || echo "no source page (rc=$?)"
  grep -E "Duration|DRAM Throughput|Issue Slots|Warp Cycles Per Issued" $O/ncu-h$h.txt | head -5
  el ncu-h$h
done
for l2 in flush dirty; do
  timeout $(lim 25) $M bench --backend cuda --batch 16 --heads 8,16,64 --qlen 1,9 --prefix 4096 \
    --page-size 64 --l2 $l2 --reps 200 --max-seconds 1 --csv $O/cli-$l2.csv > $O/cli-$l2.log 2>&1
  echo "cli $l2 rc=$?"; tail -2 $O/cli-$l2.log
done
# the engine path over an FP8 cache since the page ids (session 50: H 8 at limits 1.5 took the
# 16-row instance, 1.134 of the exact 8-row plan, at page_size 1)
for c in 1 1.5; do for b in 1 16; do # --batch takes one value
  timeout $(lim 30) $M bench --backend cuda --batch $b --heads 8,16 --qlen 1 --prefix 131072 \
    --kv-dtype fp8 --engine $c --engine-csv $O/engine-$c-b$b.csv > $O/engine-$c-b$b.log 2>&1
  echo "engine $c B $b rc=$?"; tail -4 $O/engine-$c-b$b.log
done; done
el done
