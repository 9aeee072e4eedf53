#!/usr/bin/env bash
# Session 39, call 2 (from the checkout root with diag-step-mw.patch applied, .debs carried):
# do a plan for limits' blocks past the step cost the engine path its gap at B 1? A plan for
# limits sizes its split grid for the fewest waves plus more_waves (2 at B 1): 256-396 blocks
# where a B 1 step runs 65-132 items, so that up to two rounds of blocks with nothing to do are
# dispatched, one SM each, after the step's blocks. MLAV_DIAG_STEP_MW (the patch's knob, host
# only) sets more_waves for plans for limits: unset (the rule), 0 and 1. The production preset
# through the engine path, limits 1.0 and 1.5 times the lengths, two rounds interleaved.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cmake -S . -B build-d -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > build-d.log 2>&1 &&
  cmake --build build-d -j16 --target mlaverify_cli >> build-d.log 2>&1 || echo "build failed"
el built
for r in 1 2; do
  for mw in rule 0 1; do
    for e in 1.0 1.5; do
      if [ $mw = rule ]; then unset MLAV_DIAG_STEP_MW; else export MLAV_DIAG_STEP_MW=$mw; fi
      timeout 60 build-d/mlaverify bench --backend cuda --preset production --engine $e --engine-csv e-$mw-$e-$r.csv > e-$mw-$e-$r.log 2>&1 || echo "rc=$? $mw $e $r"
    done
  done
  el "round $r"
done
unset MLAV_DIAG_STEP_MW
python3 - <<'PY' | tee $OUT/mw.txt
import csv, math, os, collections
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
for e in ('1.0', '1.5'):
    t = collections.defaultdict(lambda: collections.defaultdict(list))
    for mw in ('rule', '0', '1'):
        for r in (1, 2):
            f = 'e-%s-%s-%d.csv' % (mw, e, r)
            for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                k = (int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))
                if x['run_us'] != 'nan':
                    t[k][mw + 'run'].append(float(x['run_us']))
                    t[k][mw + 'exact'].append(float(x['exact_us']))
    ks = sorted(k for k in t if all(t[k][m + 'run'] for m in ('rule', '0', '1')))
    m = {k: {c: min(v) for c, v in t[k].items()} for k in ks}
    ex = lambda k: min(m[k]['ruleexact'], m[k]['0exact'], m[k]['1exact'])
    print('--engine %s: %d points; run / exact (the min of the three variants\' exact plans, two rounds each)' % (e, len(ks)))
    for mw in ('rule', '0', '1'):
        for name, f in (('all', lambda k: True), ('B 1', lambda k: k[0] == 1), ('batched', lambda k: k[0] > 1)):
            v = [m[k][mw + 'run'] / ex(k) for k in ks if f(k)]
            print('  mw %-4s %-7s %.4f (%.3f-%.3f), within 3%% at %d of %d' % (mw, name, g(v), min(v), max(v), sum(x <= 1.03 for x in v), len(v)))
    print('  B H q prefix | exact | run rule, mw0, mw1 (us) | rule, mw0, mw1 / exact')
    for k in ks:
        x = ex(k)
        print('  %2d %3d %2d %6d | %9.2f | %9.2f %9.2f %9.2f | %.3f %.3f %.3f' % (k + (x, m[k]['rulerun'], m[k]['0run'], m[k]['1run'], m[k]['rulerun'] / x, m[k]['0run'] / x, m[k]['1run'] / x)))
PY
mkdir -p csv && mv e-*.csv csv/ && tar -czf $OUT/csv.tgz csv && tar -czf $OUT/logs.tgz build-d.log e-*.log
el done
