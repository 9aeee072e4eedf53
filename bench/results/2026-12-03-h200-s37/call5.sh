#!/usr/bin/env bash
# Session 37, call 5 (main b97a14a, .debs carried): the production preset's exact plans and
# engine path (--engine 1.5: plans for limits 1.5 times each point's lengths, device lengths,
# graph replays), two rounds; last measured in session 34 (fdf4750), before sessions 35-36's
# kernel changes.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/src-m && mkdir /tmp/src-m && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-m
cmake -S /tmp/src-m -B build-m -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > build-m.log 2>&1 &&
  cmake --build build-m -j16 --target mlaverify_cli >> build-m.log 2>&1 || echo "build failed"
el built
for r in 1 2; do
  timeout $(lim 150) build-m/mlaverify bench --backend cuda --preset production --engine 1.5 \
    --engine-csv engine-$r.csv > engine-$r.log 2>&1 || echo "engine $r rc=$?"
  el "round $r"
done
python3 - <<'PY' | tee $OUT/engine.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
key = ('batch', 'heads', 'q_len', 'prefix', 'page_size', 'dtype')
def load(f):
    return {tuple(x[k] for k in key): x for x in csv.DictReader(open(f))} if os.path.exists(f) else {}
e = {r: load('engine-%d.csv' % r) for r in (1, 2)}
for r in (1, 2):
    v = [float(x['run_us']) / float(x['exact_us']) for x in e[r].values()]
    if v: print("round %d run / exact geomean %.3f (%.3f-%.3f), within 3%% at %d of %d" % (r, g(v), min(v), max(v), sum(u <= 1.03 for u in v), len(v)))
ks = [k for k in e[1] if k in e[2]]
v = [min(float(e[r][k]['run_us']) for r in (1, 2)) / min(float(e[r][k]['exact_us']) for r in (1, 2)) for k in ks]
if v: print("min of rounds: run / exact geomean %.3f (%.3f-%.3f), within 3%% at %d of %d" % (g(v), min(v), max(v), sum(u <= 1.03 for u in v), len(v)))
for k, u in sorted(zip(ks, v), key=lambda t: -t[1])[:8]:
    print('  %-28s %.3f' % (' '.join(k), u))
PY
cp engine-*.csv $OUT/
tar -czf $OUT/logs.tgz build-m.log engine-*.log
el done
