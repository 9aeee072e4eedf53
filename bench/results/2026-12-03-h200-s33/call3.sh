#!/usr/bin/env bash
# session 33, call 3, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-03-h200-s33/call3.sh
# t: this tree (8c84006); t2: t with the sm_90a schedule's block cost 320 keys (call 2's t2).
# The production preset with the engine path (--engine 1.5: exact plans, and plans for limits 1.5
# times the lengths) of t and t2, alternating, two rounds: what the block cost does to the plans
# users run, exact and for limits.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 575 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/t2 && mkdir -p /tmp/t2 && cp -r $(git ls-files | cut -d/ -f1 | sort -u) /tmp/t2/ 2>/dev/null
sed -i 's|    sp.min_chunk = MLAV_FLASH_SM90_TILE_N;|    sp.min_chunk = MLAV_FLASH_SM90_TILE_N;\n    sp.block_cost_keys = 320;|' /tmp/t2/src/cuda/sm90/flash_sm90.h
grep -c "block_cost_keys = 320" /tmp/t2/src/cuda/sm90/flash_sm90.h
{ cmake -S /tmp/t2 -B build-t2 $cfg > t2.log 2>&1 && cmake --build build-t2 -j8 --target mlaverify_cli >> t2.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 && cmake --build build-t -j8 --target mlaverify_cli >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
el built
for r in 1 2; do for k in t t2; do
  el "engine $k $r"
  timeout $(lim 200) build-$k/mlaverify bench --backend cuda --preset production --engine 1.5 \
    --engine-csv $OUT/engine-$k-$r.csv > engine-$k-$r.log 2>&1; echo "rc=$?"
done; done
python3 - $OUT <<'PY' | tee $OUT/engine-ab.txt
import sys, csv, math, os
d = sys.argv[1]
g = lambda v: math.exp(sum(map(math.log, v)) / len(v))
def load(k, r):
    f = "%s/engine-%s-%d.csv" % (d, k, r)
    if not os.path.exists(f): return {}
    return {(x['batch'], x['heads'], x['q_len'], x['prefix'], x['dtype']): x for x in csv.DictReader(open(f))}
for r in (1, 2):
    a, b = load('t', r), load('t2', r)
    ks = [k for k in a if k in b]
    if not ks: continue
    for col in ('exact_us', 'run_us'):
        v = [float(b[k][col]) / float(a[k][col]) for k in ks]
        print("round %d: t2 / t %s geomean %.3f (%.3f-%.3f) over %d points" % (r, col, g(v), min(v), max(v), len(v)))
    for k, x in (('t', a), ('t2', b)):
        v = [float(x[q]['run_over_exact']) for q in ks]
        print("round %d: %s run / exact geomean %.3f (%.3f-%.3f), within 3%%: %d of %d" % (r, k, g(v), min(v), max(v), sum(1 for y in v if y <= 1.03), len(v)))
    for q in ks:
        e = float(b[q]['exact_us']) / float(a[q]['exact_us']); u = float(b[q]['run_us']) / float(a[q]['run_us'])
        if abs(e - 1) > 0.02 or abs(u - 1) > 0.02:
            print("   %-32s exact %8.2f -> %8.2f (%.3f)  run %8.2f -> %8.2f (%.3f)" % (' '.join(q), float(a[q]['exact_us']), float(b[q]['exact_us']), e, float(a[q]['run_us']), float(b[q]['run_us']), u))
PY
tar -czf $OUT/logs.tgz *.log
el done
