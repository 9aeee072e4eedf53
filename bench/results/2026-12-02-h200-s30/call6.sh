#!/usr/bin/env bash
# session 30, call 6, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s30/call6.sh
# The seesaw kernel's stage barriers at 128 arrivals a phase (gathered parts by
# cp.async.mbarrier.arrive.noinc, each gathering thread waiting for the block's previous phase
# first; TMA blocks by thread 0's expect_tx and 128 arrivals at once), after call 5's synccheck
# reported "Barrier overflow" and "Missing wait" on the non-noinc arrivals: synccheck, racecheck
# and memcheck on the random cases, test_sm90_gpu, the layouts test, sm90_timing 15 of the base
# tree (HEAD of the device copy) and of this one, and the _seesaw GPU tests.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/base && mkdir -p /tmp/base && git archive HEAD | tar -x -C /tmp/base
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j5 --target sm90_timing >> base.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j11 --target test_sm90_gpu sm90_timing test_sm90_layouts_gpu test_cuda_gpu test_golden \
    test_backends test_fp8 test_steps_gpu >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
for tool in synccheck racecheck memcheck; do
  el $tool
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_*random' timeout $(lim 60) compute-sanitizer --tool $tool \
    --error-exitcode 99 build-t/tests/test_sm90_gpu > $OUT/$tool.log 2>&1
  echo "$tool rc=$? ss runs: $(grep -c '^  ss ' $OUT/$tool.log) ok: $(grep '^  ss ' $OUT/$tool.log | grep -c ': ok') $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1)"
  grep -E "Barrier error|Race reported" $OUT/$tool.log | sort | uniq -c | head -4
done
timeout $(lim 40) build-t/tests/test_sm90_layouts_gpu > $OUT/layouts.log 2>&1; echo "layouts rc=$? $(grep -c PASS $OUT/layouts.log) PASS $(grep -c FAIL $OUT/layouts.log) FAIL"
MLAV_SM90_CASES=6 timeout $(lim 120) build-t/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
for k in base t; do
  el timing $k
  timeout $(lim 30) build-$k/tests/sm90_timing 15 > $OUT/timing-$k.txt 2>&1; echo "rc=$? $(tail -1 $OUT/timing-$k.txt)"
done
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
b, n = rows(d + "/timing-base.txt"), rows(d + "/timing-t.txt")
ks = [k for k in n if k in b]
print("sm90/64 column (us): base (15e5b37), this tree")
for k in ks:
    print("%-28s base %8.1f new %8.1f  new/base %.3f" % (k, b[k], n[k], n[k] / b[k]))
g = [math.log(n[k] / b[k]) for k in ks if ' 64 chain' in k]
print("geomean new/base over %d chain page-64 points: %.3f" % (len(g), math.exp(sum(g) / len(g))))
PY
el ctest
cd build-t
MLAV_TEST_STEPS=12 timeout $(lim 200) ctest --output-on-failure --timeout 150 -R "_seesaw$" > $OUT/ctest.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed|\*\*\*" $OUT/ctest.log | tail -8
cd ..
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log timing-base.txt 2>/dev/null) && (cd $OUT && rm -f *.log timing-base.txt)
el done
