#!/usr/bin/env bash
# Session 38, call 4 (main bfc7cce, .debs carried): where the engine path's few microseconds at
# B 1 go. Nsight Compute's kernel durations (gpu__time_duration, no clock control) of every
# kernel `mlaverify bench --engine 1.0` launches (the exact plan's replays, then the plan for
# limits' steps: scheduler, split kernel, combine) at four production-preset points (page_size 1,
# random trees, L2 flushed before each replay).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 400 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/src-m && mkdir /tmp/src-m && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-m
cmake -S /tmp/src-m -B build-m -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > build-m.log 2>&1 &&
  cmake --build build-m -j16 --target mlaverify_cli >> build-m.log 2>&1 || echo "build failed"
el built
for pt in "8 16 4096" "8 9 4096" "64 1 32768" "16 16 32768"; do
  set -- $pt; tag=h$1-q$2-p$3
  timeout $(lim 90) ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    build-m/mlaverify bench --backend cuda --batch 1 --heads $1 --qlen $2 --prefix $3 --page-size 1 \
    --reps 5 --min-reps 5 --engine 1.0 --engine-csv eng-$tag.csv > ncu-$tag.csv 2> ncu-$tag.err
  echo "ncu $tag rc=$?"
  el "$tag"
done
python3 - <<'PY' | tee $OUT/kernels.txt
import csv, glob, re, collections, statistics
for f in sorted(glob.glob('ncu-*.csv')):
    rows = [r for r in csv.reader(open(f)) if len(r) > 10]
    if not rows: print(f, 'no rows'); continue
    h = rows[0]; ki = h.index('Kernel Name'); vi = h.index('Metric Value'); ii = h.index('ID')
    seq = [(int(r[ii]), r[ki], float(r[vi]) / 1e3) for r in rows[1:] if r[vi].replace('.', '').replace(',', '').isdigit()]
    by = collections.OrderedDict()
    for i, k, us in seq:
        short = re.sub(r'\(.*', '', k)[:90] + (' STEP' if re.search(r'true|Lb1E', k) else '')
        by.setdefault(k, []).append(us)
    print('== %s: %d kernels' % (f, len(seq)))
    for k, v in by.items():
        print('  %4d x median %8.2f us (min %8.2f)  %s' % (len(v), statistics.median(v), min(v), k[:160]))
    print('  order:', ' '.join('%s' % (re.sub(r'^.*?(\w+)(<|\().*$', r'\1', k)[:18]) for _, k, _ in seq[-12:]))
PY
cp eng-*.csv $OUT/ 2>/dev/null
tar -czf $OUT/logs.tgz build-m.log ncu-*.csv ncu-*.err
el done
