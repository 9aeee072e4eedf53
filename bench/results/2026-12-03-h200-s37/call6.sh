#!/usr/bin/env bash
# Session 37, call 6 (main b97a14a, .debs carried): which sm_90a kernel the production preset's
# exact plans and engine path run best with: the default rule, MLAV_SM90_KERNEL=seesaw and
# =producer (read at plan time, both paths), two rounds each, --engine 1.5.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/src-m && mkdir /tmp/src-m && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-m
cmake -S /tmp/src-m -B build-m -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > build-m.log 2>&1 &&
  cmake --build build-m -j16 --target mlaverify_cli >> build-m.log 2>&1 || echo "build failed"
el built
for r in 1 2; do for v in def seesaw producer; do
  e=X=1; [ $v = def ] || e=MLAV_SM90_KERNEL=$v
  timeout 100 env $e build-m/mlaverify bench --backend cuda --preset production --engine 1.5 \
    --engine-csv engine-$v-$r.csv > engine-$v-$r.log 2>&1 || echo "engine $v $r rc=$?"
done; el "round $r"; done
python3 - <<'PY' | tee $OUT/kernels.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
key = ('batch', 'heads', 'q_len', 'prefix', 'page_size', 'dtype')
def load(f):
    return {tuple(x[k] for k in key): x for x in csv.DictReader(open(f))} if os.path.exists(f) else {}
V = ('def', 'seesaw', 'producer')
e = {(v, r): load('engine-%s-%d.csv' % (v, r)) for v in V for r in (1, 2)}
ks = [k for k in e[('def', 1)] if all(k in e[(v, r)] for v in V for r in (1, 2))]
t = {(v, c, k): min(float(e[(v, r)][k][c]) for r in (1, 2)) for v in V for c in ('exact_us', 'run_us') for k in ks}
for v in V:
    print('%-8s run / default exact: geomean %.3f; exact / default exact %.3f; run / default run %.3f' % (
        v, g([t[(v, 'run_us', k)] / t[('def', 'exact_us', k)] for k in ks]),
        g([t[(v, 'exact_us', k)] / t[('def', 'exact_us', k)] for k in ks]),
        g([t[(v, 'run_us', k)] / t[('def', 'run_us', k)] for k in ks])))
best = [min(t[(v, 'run_us', k)] for v in V) / t[('def', 'exact_us', k)] for k in ks]
print('best kernel per point for the run, over the default exact: geomean %.3f, within 3%% at %d of %d' % (g(best), sum(b <= 1.03 for b in best), len(ks)))
print('point                        | exact def seesaw producer | run def seesaw producer')
for k in ks:
    print('%-28s | %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f' % ((' '.join(k),) + tuple(t[(v, 'exact_us', k)] for v in V) + tuple(t[(v, 'run_us', k)] for v in V)))
PY
tar -czf $OUT/csv.tgz engine-*.csv
tar -czf $OUT/logs.tgz build-m.log engine-*.log
el done
