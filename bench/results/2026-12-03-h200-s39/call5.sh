#!/usr/bin/env bash
# Session 39, call 5 (from the checkout root on branch limits-rule, .debs carried): a plan for
# limits picks its sm_90a kernel over the step rule's fewest waves of items instead of its grid's
# (mlav_flash_sm90_seesaw_limits): at 6 of the production preset's single requests (limits 1.0)
# the grid's 396 items took the producer kernel where the exact plan runs the seesaw, whose
# page-1 instance call 4 made 0.97x faster. r = this tree; b = main bdb4ed1 (limits-rule.patch
# reversed). r's test_steps_gpu and test_cuda_gpu (ctest); the production preset (page_size 1)
# through the engine path, limits 1.0 and 1.5 times the lengths, b and r in two interleaved rounds.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s39
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in r b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/limits-rule.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = r ] && { tg="mlaverify_cli test_steps_gpu test_cuda_gpu test_kernel_rules"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
(cd build-r && timeout 200 ctest --timeout 150 -R "^(test_steps_gpu|test_cuda_gpu|test_kernel_rules)$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed|Test +#" ../r-ctest.log | head -20)
el tested
for r in 1 2; do
  for v in b r; do
    for e in 1.0 1.5; do
      timeout 60 build-$v/mlaverify bench --backend cuda --preset production --engine $e --engine-csv e-$v-$e-$r.csv > e-$v-$e-$r.log 2>&1 || echo "rc=$? $v $e $r"
    done
  done
  el "round $r"
done
python3 - <<'PY' | tee $OUT/engine.txt
import csv, math, os, collections
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
for e in ('1.0', '1.5'):
    t = collections.defaultdict(lambda: collections.defaultdict(list))
    for v in 'br':
        for r in (1, 2):
            f = 'e-%s-%s-%d.csv' % (v, e, r)
            for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                k = (int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))
                if x['run_us'] != 'nan':
                    t[k][v + 'run'].append(float(x['run_us']))
                    t[k][v + 'exact'].append(float(x['exact_us']))
    ks = sorted(k for k in t if all(t[k][c] for c in ('brun', 'rrun', 'bexact', 'rexact')))
    m = {k: {c: min(v) for c, v in t[k].items()} for k in ks}
    ex = lambda k: min(m[k]['bexact'], m[k]['rexact'])
    print('--engine %s: %d points (min of two rounds; exact: the min of b and r, the same plans)' % (e, len(ks)))
    print('  exact r / b %.4f; run r / b %.4f' % (g([m[k]['rexact'] / m[k]['bexact'] for k in ks]), g([m[k]['rrun'] / m[k]['brun'] for k in ks])))
    for v in 'br':
        for name, f in (('all', lambda k: True), ('B 1', lambda k: k[0] == 1), ('batched', lambda k: k[0] > 1)):
            x = [m[k][v + 'run'] / ex(k) for k in ks if f(k)]
            print('  %s run / exact %-7s %.4f (%.3f-%.3f), within 3%% at %d of %d' % (v, name, g(x), min(x), max(x), sum(y <= 1.03 for y in x), len(x)))
    print('  B H q prefix | exact | run b, r (us) | b, r / exact | r / b')
    for k in ks:
        x = ex(k)
        print('  %2d %3d %2d %6d | %9.2f | %9.2f %9.2f | %.3f %.3f | %.3f' % (k + (x, m[k]['brun'], m[k]['rrun'], m[k]['brun'] / x, m[k]['rrun'] / x, m[k]['rrun'] / m[k]['brun'])))
PY
mkdir -p csv && mv e-*.csv csv/ && tar -czf $OUT/csv.tgz csv && tar -czf $OUT/logs.tgz build-*.log r-ctest.log e-*.log
el done
