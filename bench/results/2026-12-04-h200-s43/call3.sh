#!/usr/bin/env bash
# Session 43 call 3: where the engine path's time goes at B 1 (the production preset's worst
# run / exact points, s40: H 8 q_len 9 and 16 at 32k 1.15-1.16): the working tree's cli,
# bench --engine 1.0 at a few points, then Nsight Compute's kernel durations for one point.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf build-k && cmake -S . -B build-k -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > build-k.log 2>&1 &&
  cmake --build build-k -j16 --target mlaverify_cli >> build-k.log 2>&1 || { tail -20 build-k.log; exit 1; }
el built
B=build-k/mlaverify
for pt in "8 9 32768" "8 16 32768" "8 1 4096" "8 64 32768" "16 16 4096" "64 1 4096"; do
  set -- $pt
  $B bench --backend cuda --batch 1 --heads $1 --qlen $2 --prefix $3 --page-size 1 --engine 1.0 --reps 30 --min-reps 10 --max-seconds 1 2>&1 | grep -E '^ +[0-9]|engine:' 
done
el bench
for pt in "8 9 32768" "8 64 32768"; do
  set -- $pt
  ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv \
    $B bench --backend cuda --batch 1 --heads $1 --qlen $2 --prefix $3 --page-size 1 --engine 1.0 --reps 3 --min-reps 3 --max-seconds 0.1 \
    > ncu-$1-$2.csv 2> ncu-$1-$2.err; echo "ncu rc=$?"
  python3 - ncu-$1-$2.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; ix = {h: i for i, h in enumerate(hdr)}
seq = []
for r in rows[1:]:
    if r[ix['Metric Name']] != 'gpu__time_duration.sum': continue
    seq.append((r[ix['ID']], r[ix['Kernel Name']][:60], r[ix['Grid Size']], r[ix['Metric Value']]))
for s in seq[-40:]: print(*s)
PY
done
el ncu
cp ncu-*.csv $OUT/ 2>/dev/null
