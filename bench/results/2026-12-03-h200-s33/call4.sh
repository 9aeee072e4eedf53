#!/usr/bin/env bash
# session 33, call 4, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-03-h200-s33/call4.sh
# t: 067b06a + lead4.patch (WG1's S takes stage 1's column blocks from 4: 4..7, 0..3, 8, so that
# it starts on its own refill, landed first, where session 31's profile had WG1 waiting for block
# 0, which WG0 refills last in a pair, in 8.3% of its samples). Base: t with the patch reversed
# (067b06a; the device copy's .git stops at ac99055). test_sm90_gpu and the layouts test on t,
# racecheck on its random cases; sm90_timing 15 of both, two rounds; mlaverify bench (BF16, 16
# points) and the production preset's engine path of both.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 440 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
d=bench/results/2026-12-03-h200-s33
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r $(git ls-files | cut -d/ -f1 | sort -u) /tmp/base/ 2>/dev/null
(cd /tmp/base && patch -R -p1 -s < $OLDPWD/$d/lead4.patch) && echo "base: patch reversed"
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j6 --target sm90_timing mlaverify_cli >> base.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j10 --target test_sm90_gpu sm90_timing test_sm90_layouts_gpu mlaverify_cli >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
timeout $(lim 40) build-t/tests/test_sm90_layouts_gpu > layouts.log 2>&1; echo "layouts rc=$? $(grep -c PASS layouts.log) PASS $(grep -c FAIL layouts.log) FAIL"
MLAV_SM90_CASES=6 timeout $(lim 120) build-t/tests/test_sm90_gpu > test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' test_sm90.log) ok: $(grep '^  ss ' test_sm90.log | grep -c ': ok') $(grep -E 'PASSED|FAILED' test_sm90.log | tail -2 | tr '\n' ' ')"
for r in 1 2; do for k in base t; do
  el timing $k $r
  timeout $(lim 30) build-$k/tests/sm90_timing 15 > $OUT/timing-$k-$r.txt 2>&1; echo "rc=$? $(tail -1 $OUT/timing-$k-$r.txt)"
done; done
python3 - $OUT <<'PY' | tee $OUT/timing-ab.txt
import sys, math, os
def rows(f):
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            try: r[' '.join(a[0].split())] = float(a[1].split()[3])
            except Exception: pass
    return r
d = sys.argv[1]
for r in (1, 2):
    b, n = rows("%s/timing-base-%d.txt" % (d, r)), rows("%s/timing-t-%d.txt" % (d, r))
    ks = [k for k in n if k in b]
    print("round %d: sm90/64 column (us): base (067b06a), t (lead4)" % r)
    for k in ks:
        print("%-28s base %8.1f new %8.1f  new/base %.3f" % (k, b[k], n[k], n[k] / b[k]))
    g = [math.log(n[k] / b[k]) for k in ks]
    c = [math.log(n[k] / b[k]) for k in ks if ' 64 chain' in k]
    if g: print("round %d geomean new/base over %d points: %.3f; %d chain page-64 points: %.3f" % (r, len(g), math.exp(sum(g) / len(g)), len(c), math.exp(sum(c) / len(c))))
PY
for k in base t; do for b in 1 16; do
  el "bench $k B $b"
  timeout $(lim 40) build-$k/mlaverify bench --backend cuda --batch $b --heads 8,128 --qlen 1,16 \
    --prefix 32768,131072 --page-size 64 --reps 20 --min-reps 10 --csv $OUT/bench-$k-$b.csv > bench-$k-$b.log 2>&1; echo "rc=$?"
done; done
for k in base t; do
  el "engine $k"
  timeout $(lim 60) build-$k/mlaverify bench --backend cuda --preset production --engine 1.5 \
    --engine-csv $OUT/engine-$k.csv > engine-$k.log 2>&1; echo "rc=$?"
done
python3 - $OUT <<'PY' | tee $OUT/bench-ab.txt
import sys, csv, math, os
d = sys.argv[1]
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
def load(f, key, col):
    if not os.path.exists(f): return {}
    return {tuple(x[k] for k in key): float(x[col]) for x in csv.DictReader(open(f))}
key = ('batch', 'heads', 'q_len', 'prefix')
for b in (1, 16):
    rs = list(csv.DictReader(open("%s/bench-base-%d.csv" % (d, b)))) if os.path.exists("%s/bench-base-%d.csv" % (d, b)) else []
    col = [c for c in (rs[0].keys() if rs else []) if c.endswith('us')][:1]
    if not col: continue
    a, n = load("%s/bench-base-%d.csv" % (d, b), key, col[0]), load("%s/bench-t-%d.csv" % (d, b), key, col[0])
    v = [n[k] / a[k] for k in a if k in n]
    print("bench B %d (%s) t / base geomean %.3f (%.3f-%.3f) over %d" % (b, col[0], g(v), min(v), max(v), len(v)))
    for k in a:
        if k in n: print("   %-24s base %9.2f t %9.2f  %.3f" % (' '.join(k), a[k], n[k], n[k] / a[k]))
for col in ('exact_us', 'run_us'):
    a, n = load("%s/engine-base.csv" % d, key, col), load("%s/engine-t.csv" % d, key, col)
    v = [n[k] / a[k] for k in a if k in n]
    if v: print("engine %s t / base geomean %.3f (%.3f-%.3f) over %d" % (col, g(v), min(v), max(v), len(v)))
PY
el racecheck
MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_*random' timeout $(lim 60) compute-sanitizer --tool racecheck \
  --error-exitcode 99 build-t/tests/test_sm90_gpu > racecheck.log 2>&1
echo "racecheck rc=$? $(grep -E 'SUMMARY' racecheck.log | tail -1)"
tar -czf $OUT/logs.tgz *.log
el done
