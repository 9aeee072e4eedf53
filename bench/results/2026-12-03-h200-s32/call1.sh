#!/usr/bin/env bash
# session 32, call 1 (prepared in session 31 as its call 5), from the checkout's root with .debs carried:
#   bash bench/results/2026-12-03-h200-s32/call1.sh (step-loop.patch applied to eed3ce0: the tree it ran)
# The sm_90a STEP instances' blocks loop through the plan's most items on a grid of one block
# an SM (kernel.cuh step_items; launch step_grid), where each item had a block and every block
# past the step took a dispatch of its own after the step's blocks (call 2: the engine path at
# 1.036 of the exact plan, 1.07-1.12 at 4k). Tests: test_sm90_gpu (its step cases run a third
# of the grid's blocks, several items a block), test_steps_gpu / test_golden / test_fp8 /
# test_cuda_gpu with the _sm90 and _seesaw families, synccheck / racecheck / memcheck on
# test_sm90_gpu's random cases. Timing: the production preset with --engine 1.5 of the base
# (eed3ce0, from the device copy's git) and of this tree, two rounds; sm90_timing 15 of both (the exact path).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
R=$PWD
rm -rf /tmp/base && mkdir -p /tmp/base && git archive eed3ce0 | tar -x -C /tmp/base || echo "base archive failed"
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j5 --target sm90_timing mlaverify_cli >> base.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j11 --target test_sm90_gpu sm90_timing mlaverify_cli test_steps_gpu test_golden test_fp8 \
    test_cuda_gpu test_backends >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
MLAV_SM90_CASES=6 timeout $(lim 120) build-t/tests/test_sm90_gpu > test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' test_sm90.log) ok: $(grep '^  ss ' test_sm90.log | grep -c ': ok'); step runs: $(grep -c ',step' test_sm90.log) ok: $(grep ',step' test_sm90.log | grep -c ': ok')"
for r in 1 2; do for k in base t; do
  el "engine $k $r"
  timeout $(lim 60) build-$k/mlaverify bench --backend cuda --preset production --engine 1.5 \
    --engine-csv engine-$k-$r.csv --csv exact-$k-$r.csv > engine-$k-$r.log 2>&1; echo "rc=$?"
done; done
python3 - . <<'PY' | tee $OUT/engine-ab.txt
import sys, csv, math, os
def load(f):
    return {(r['batch'], r['heads'], r['q_len'], r['prefix']): r for r in csv.DictReader(open(f))} if os.path.exists(f) else {}
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
for r in (1, 2):
    b, t = load("engine-base-%d.csv" % r), load("engine-t-%d.csv" % r)
    ks = [k for k in t if k in b]
    print("round %d (production preset, --engine 1.5): run / exact, base (eed3ce0) and this tree; t run / base run" % r)
    for k in ks:
        print("%-22s base %.3f t %.3f   run base %9.1f t %9.1f  %.3f" % (' '.join(k), float(b[k]['run_over_exact']), float(t[k]['run_over_exact']),
              float(b[k]['run_us']), float(t[k]['run_us']), float(t[k]['run_us']) / float(b[k]['run_us'])))
    for name, d in (("base", b), ("t", t)):
        v = [float(d[k]['run_over_exact']) for k in ks]; s = [float(d[k]['step_us']) / float(d[k]['exact_us']) for k in ks]
        print("round %d %s: run / exact geomean %.3f (%.3f-%.3f), within 3%%: %d of %d; step / exact geomean %.3f" % (r, name, g(v), min(v), max(v), sum(x <= 1.03 for x in v), len(v), g(s)))
    e = [float(t[k]['exact_us']) / float(b[k]['exact_us']) for k in ks]
    print("round %d exact t / base geomean %.3f" % (r, g(e)))
PY
for k in base t; do
  el timing $k
  timeout $(lim 30) build-$k/tests/sm90_timing 15 > timing-$k.txt 2>&1; echo "rc=$? $(tail -1 timing-$k.txt)"
done
python3 - . <<'PY' | tee $OUT/timing-ab.txt
import math
def rows(f):
    r = {}
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            try: r[' '.join(a[0].split())] = float(a[1].split()[3])
            except Exception: pass
    return r
b, n = rows("timing-base.txt"), rows("timing-t.txt")
g = [math.log(n[k] / b[k]) for k in n if k in b and ' 64 chain' in k]
print("exact path, sm90_timing 15: t / base (eed3ce0) geomean over %d chain page-64 points %.3f (%.3f-%.3f)" % (len(g), math.exp(sum(g) / len(g)), math.exp(min(g)), math.exp(max(g))))
PY
for tool in synccheck racecheck memcheck; do
  el $tool
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_*random' timeout $(lim 60) compute-sanitizer --tool $tool \
    --error-exitcode 99 build-t/tests/test_sm90_gpu > $tool.log 2>&1
  echo "$tool rc=$? ss runs: $(grep -c '^  ss ' $tool.log) step: $(grep -c ',step' $tool.log) $(grep -E 'SUMMARY' $tool.log | tail -1)"
  grep -E "Barrier error|Race reported" $tool.log | sort | uniq -c | head -4
done
el ctest
cd build-t
MLAV_TEST_STEPS=12 timeout $(lim 240) ctest --output-on-failure --timeout 200 -R "test_steps_gpu_s|test_golden_s|test_fp8_s|test_cuda_gpu_s|test_backends_s" > ../ctest.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed|\*\*\*|Passed" ../ctest.log | tail -14
cd ..
cp engine-t-2.csv $OUT/
tar -czf $OUT/logs.tgz *.log engine-*.csv exact-*.csv timing-*.txt
el done
