#!/usr/bin/env bash
# session 29, call 2, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s29/call2.sh
# The seesaw kernel as the default where blocks have >= 6 tiles (mbarrier hand-overs, warps
# reconverged after a one-thread TMA issue, no L2 prefetch, page ids a pair ahead) and the family
# rule by tiles an SM: racecheck and synccheck on its cases, test_sm90_gpu, the layout check,
# sm90_timing 15 with the rule against MLAV_SM90_KERNEL=producer (twice, interleaved), and
# copy_probe.py (the harness's data and flush against sm90_timing's).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
{ cmake -S . -B build-s29 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DMLAV_NCCL=OFF > build.log 2>&1 &&
  cmake --build build-s29 -j16 --target mlaverify test_sm90_gpu sm90_timing test_sm90_layouts_gpu test_kernel_rules >> build.log 2>&1; } ||
  { echo "build failed"; grep -m12 -E "error|Error" build.log; }
grep -E "spill|Used 2[0-9][0-9] registers" build.log | sort | uniq -c | head -6
el built
build-s29/tests/test_kernel_rules > $OUT/rules.log 2>&1; echo "test_kernel_rules rc=$?"
for tool in racecheck synccheck; do
  el $tool
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout $(lim 80) compute-sanitizer --tool $tool \
    --error-exitcode 99 build-s29/tests/test_sm90_gpu > $OUT/$tool.log 2>&1
  echo "$tool rc=$? ss runs: $(grep -c '^  ss ' $OUT/$tool.log) ok: $(grep '^  ss ' $OUT/$tool.log | grep -c ': ok')"
  grep -E "SUMMARY" $OUT/$tool.log | tail -1
  grep -E "Race reported|Error:" $OUT/$tool.log | sort | uniq -c | head -4
done
el test_sm90_gpu
MLAV_SM90_CASES=6 timeout $(lim 70) build-s29/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
grep -E "seed|PASSED|FAILED|\[  ERROR" $OUT/test_sm90.log | head -6
echo "ss runs: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
timeout $(lim 40) build-s29/tests/test_sm90_layouts_gpu > $OUT/layouts.log 2>&1; echo "test_sm90_layouts_gpu rc=$? $(tail -1 $OUT/layouts.log)"
for r in 1 2; do
  for k in rule producer; do
    el timing $k $r
    if [ $k = rule ]; then env -u MLAV_SM90_KERNEL timeout $(lim 30) build-s29/tests/sm90_timing 15 > $OUT/timing-$k-$r.txt 2>&1
    else MLAV_SM90_KERNEL=producer timeout $(lim 30) build-s29/tests/sm90_timing 15 > $OUT/timing-$k-$r.txt 2>&1; fi
    echo "rc=$? $(tail -1 $OUT/timing-$k-$r.txt)"
  done
done
python3 - $OUT <<'PY' | tee $OUT/ab.txt
import sys, math, os
def rows(f):
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            try: r[' '.join(a[0].split())] = (float(a[1].split()[0]), float(a[1].split()[3]))
            except Exception: pass
    return r
d = sys.argv[1]
t = {(k, r): rows("%s/timing-%s-%d.txt" % (d, k, r)) for k in ("rule", "producer") for r in (1, 2)}
ks = [k for k in t[("rule", 1)] if all(k in v for v in t.values())]
print("sm90/64 column (us): the rule (seesaw where blocks average >= 6 tiles) / MLAV_SM90_KERNEL=producer, two rounds; legal_us of round 1")
for k in ks:
    a = [t[("rule", r)][k][1] / t[("producer", r)][k][1] for r in (1, 2)]
    print("%-26s legal %8.1f producer %8.1f rule %8.1f  %.3f %.3f" % (k, t[("rule", 1)][k][0], t[("producer", 1)][k][1], t[("rule", 1)][k][1], a[0], a[1]))
for r in (1, 2):
    g = [math.log(t[("rule", r)][k][1] / t[("producer", r)][k][1]) for k in ks]
    print("round %d geomean rule / producer: %.3f (%d points)" % (r, math.exp(sum(g) / len(g)), len(g)))
PY
el probe
MLAVERIFY_LIBRARY=$PWD/build-s29/libmlaverify.so PYTHONPATH=$PWD/python timeout $(lim 150) python3 \
  bench/results/2026-12-02-h200-s29/copy_probe.py 2>&1 | tee $OUT/copy_probe.txt | grep -v Warning
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log timing-*.txt 2>/dev/null) && (cd $OUT && rm -f *.log timing-*.txt)
el done
