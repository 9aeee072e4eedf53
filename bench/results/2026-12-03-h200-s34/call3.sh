#!/usr/bin/env bash
# session 34, call 3, from the checkout's root on branch s33-shares (fdf4750) with .debs carried:
#   bash bench/results/2026-12-03-h200-s34/call3.sh
# The production preset (exact plans and the engine path, --engine 1.5) of base (main 1f3f2c9:
# tile.patch and shares.patch reversed) and t (fdf4750: equal shares weighed in whole tiles), two
# rounds interleaved. Call 1 of session 33 measured the shares rule weighed by keys there (exact
# plans 0.996 geomean, 0.854-1.237); fdf4750 keeps the uniform schedule at B 1.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
d=bench/results/2026-12-03-h200-s34
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
top=$(git ls-files | cut -d/ -f1 | sort -u)
for k in base t; do rm -rf /tmp/src-$k && mkdir -p /tmp/src-$k && cp -r $top /tmp/src-$k/ 2>/dev/null; done
(cd /tmp/src-base && patch -R -p1 -s < $OLDPWD/$d/tile.patch &&
  patch -R -p1 -s < $OLDPWD/bench/results/2026-12-03-h200-s33/shares.patch) || echo "reverse base failed"
el build
for k in base t; do
  { cmake -S /tmp/src-$k -B /tmp/build-$k $cfg > build-$k.log 2>&1 &&
    cmake --build /tmp/build-$k -j8 --target mlaverify_cli >> build-$k.log 2>&1 || echo "build $k failed"; } &
done
wait
el built
for r in 1 2; do for k in base t; do
  timeout 120 /tmp/build-$k/mlaverify bench --backend cuda --preset production --engine 1.5 \
    --engine-csv engine-$k-$r.csv > engine-$k-$r.log 2>&1 || echo "engine $k $r rc=$?"
done; done
el benched
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
key = ('batch', 'heads', 'q_len', 'prefix', 'page_size', 'dtype')
def load(f):
    return {tuple(x[k] for k in key): x for x in csv.DictReader(open(f))} if os.path.exists(f) else {}
a = {r: load('engine-base-%d.csv' % r) for r in (1, 2)}
n = {r: load('engine-t-%d.csv' % r) for r in (1, 2)}
for col in ('exact_us', 'run_us'):
    for r in (1, 2):
        v = [float(n[r][k][col]) / float(a[r][k][col]) for k in a[r] if k in n[r]]
        if v: print("round %d %s t / base geomean %.3f (%.3f-%.3f) over %d" % (r, col, g(v), min(v), max(v), len(v)))
for r in (1, 2):
    for k in ('base', 't'):
        x = load('engine-%s-%d.csv' % (k, r))
        v = [float(e['run_us']) / float(e['exact_us']) for e in x.values()]
        if v: print("round %d %s run / exact geomean %.3f (%.3f-%.3f), within 3%% at %d of %d" % (r, k, g(v), min(v), max(v), sum(u <= 1.03 for u in v), len(v)))
print("points (exact us base r1 r2 | t r1 r2 | t/base from the mins; run likewise)")
for k in sorted(a[1], key=lambda k: tuple(int(x) if x.isdigit() else 0 for x in k)):
    if k not in n[1]: continue
    eb = min(float(a[r][k]['exact_us']) for r in (1, 2) if k in a[r]); et = min(float(n[r][k]['exact_us']) for r in (1, 2) if k in n[r])
    rb = min(float(a[r][k]['run_us']) for r in (1, 2) if k in a[r]); rt = min(float(n[r][k]['run_us']) for r in (1, 2) if k in n[r])
    print("  %-26s exact %9.2f %9.2f %.3f | run %9.2f %9.2f %.3f" % (' '.join(k), eb, et, et / eb, rb, rt, rt / rb))
PY
cp engine-*.csv $OUT/
tar -czf $OUT/logs.tgz *.log
el done
