#!/usr/bin/env bash
# Session 37, call 2 (a diagnosis, nothing here lands): why B 16, q_len 9, 131k takes more time a
# 64-key tile than q_len 16 does (B 16, H 16: 2.19 us a tile an SM against 1.95 in s36 call 5;
# FlashMLA 1.82 and 1.85). d = main + diag-schedule.patch (environment knobs on the sm_90a
# schedule: MLAV_DIAG_SHARES 0 never, 2 always where it applies; MLAV_DIAG_MAXSPLITS). Chains,
# page 64, B 16, H 8 and 16, q_len 9 and 16, 32k and 131k, under each schedule; then Nsight
# Compute (speed of light, memory tables) of the split kernel and the combine at B 16, H 16,
# q_len 9 and 16, 131k, under the default schedule.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s37
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF"
rm -rf /tmp/src-d && mkdir /tmp/src-d && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-d
(cd /tmp/src-d && git apply "$OLDPWD/$R/diag-schedule.patch") || echo "patch failed"
cmake -S /tmp/src-d -B build-d $cfg > build-d.log 2>&1 && cmake --build build-d -j16 --target mlaverify_cli >> build-d.log 2>&1 || echo "build-d failed"
el built
pts="--batch 16 --heads 8,16 --qlen 9,16 --prefix 32768,131072 --page-size 64 --tree chain"
bb() { timeout $(lim 60) env "$@" --backend cuda --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do
  for v in def:X=1 sh0:MLAV_DIAG_SHARES=0 sh2:MLAV_DIAG_SHARES=2 ms2:MLAV_DIAG_MAXSPLITS=2 ms4:MLAV_DIAG_MAXSPLITS=4; do
    bb ${v#*:} build-d/mlaverify bench $pts --csv ${v%%:*}-$r.csv
  done; el "round $r"
done
python3 - <<'PY' | tee $OUT/sched.txt
import csv, os
t = {}
for v in ('def', 'sh0', 'sh2', 'ms2', 'ms4'):
    for r in (1, 2):
        f = '%s-%d.csv' % (v, r)
        for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
            k = (int(x['heads']), int(x['q_len']), int(x['prefix']))
            t.setdefault(k, {}).setdefault(v, []).append(float(x['time_us']))
print('B 16 chain page 64: min us of two rounds (round 1 / round 2)')
for k in sorted(t):
    print('H %3d q %2d prefix %6d: ' % k + '  '.join('%s %8.1f (%.1f/%.1f)' % (v, min(e), e[0], e[-1]) for v, e in t[k].items()))
PY
mkdir -p csv && mv *.csv csv/ && tar -czf $OUT/csv.tgz csv
el bench
for q in 9 16; do
  timeout $(lim 120) ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy \
    -k regex:"seesaw|combine" --launch-skip 4 -c 4 -f -o /tmp/n$q build-d/mlaverify bench --batch 16 --heads 16 --qlen $q \
    --prefix 131072 --page-size 64 --tree chain --reps 6 --min-reps 6 --backend cuda > ncu-$q.log 2>&1
  echo "ncu q$q rc=$?"
  ncu -i /tmp/n$q.ncu-rep --page details > $OUT/ncu-q$q.txt 2>&1
  grep -E "^  [a-z_]|Duration|DRAM Throughput|L2 Hit Rate|Memory Throughput" $OUT/ncu-q$q.txt | head -30
done
el ncu
tar -czf $OUT/logs.tgz build-*.log ncu-*.log
el done
