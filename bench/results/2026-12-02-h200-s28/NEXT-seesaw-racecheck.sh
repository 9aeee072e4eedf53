#!/usr/bin/env bash
# next session, one device call (under 300 s), from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s28/NEXT-seesaw-racecheck.sh
# Does racecheck's report on the seesaw kernel (call 5: sref across BAR_M, the epilogue's row sums)
# come from its tracking of bar.arrive? Two trees of this checkout side by side: main's kernel
# (no flag) and MLAV90_SEESAW_MBAR=1 (the five one-way hand-overs as mbarriers, which racecheck
# follows in the producer kernel). racecheck on test_sm90_tma_tiles (2 cases) on each, then
# test_sm90_gpu (6 cases a test) on the mbarrier build, then sm90_timing 15 of both under the
# seesaw rule (MLAV_SM90_KERNEL=auto) and the mbarrier build's time / the base's, sm90/64 column.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
# a step's timeout: at most $1 s and what is left of 285 s (at least 5: a step past it fails fast)
lim() { local l=$(( 285 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { local d=$1 f=$2
  { cmake -S . -B $d $cfg -DCMAKE_CUDA_FLAGS="$f" > $d.log 2>&1 &&
    cmake --build $d -j8 --target test_sm90_gpu sm90_timing >> $d.log 2>&1; } ||
    { echo "$d failed"; grep -m8 -E "error|Error" $d.log; }; }
el build
b build-base "" &
b build-mbar "-DMLAV90_SEESAW_MBAR=1" &
wait
for n in mbar base; do
  el racecheck $n
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout $(lim 80) compute-sanitizer --tool racecheck \
    --error-exitcode 99 build-$n/tests/test_sm90_gpu > $OUT/racecheck-$n.log 2>&1
  echo "$n racecheck rc=$? ss cases: $(grep -c '^  ss ' $OUT/racecheck-$n.log) ok: $(grep '^  ss ' $OUT/racecheck-$n.log | grep -c ': ok')"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/racecheck-$n.log | tail -1
done
el test_sm90_gpu mbar
MLAV_SM90_CASES=6 timeout $(lim 70) build-mbar/tests/test_sm90_gpu > $OUT/test-mbar.log 2>&1; echo "test_sm90_gpu mbar rc=$?"
grep -E "seed|PASSED|FAILED|\[  ERROR" $OUT/test-mbar.log | head -14
echo "ss lines: $(grep -c '^  ss ' $OUT/test-mbar.log) ok: $(grep '^  ss ' $OUT/test-mbar.log | grep -c ': ok')"
for n in base mbar; do
  el timing $n
  MLAV_SM90_KERNEL=auto timeout $(lim 45) build-$n/tests/sm90_timing 15 > $OUT/timing-$n.txt 2>&1
  echo "$n rc=$? $(tail -1 $OUT/timing-$n.txt)"
done
python3 - $OUT <<'PY' | tee $OUT/ab.txt
import sys, math, os
def rows(f):  # point -> the sm90/64 column (us)
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            r[' '.join(a[0].split())] = float(a[1].split()[3])
    return r
d = sys.argv[1]
base, mbar = rows(d + '/timing-base.txt'), rows(d + '/timing-mbar.txt')
ks = [k for k in base if k in mbar]
print("sm90/64 column under MLAV_SM90_KERNEL=auto: base us, mbar us, mbar / base")
for k in ks:
    print("%-26s %9.1f %9.1f %7.3f" % (k, base[k], mbar[k], mbar[k] / base[k]))
g = [math.log(mbar[k] / base[k]) for k in ks]
print("geomean mbar / base time: %.3f (%d points)" % (math.exp(sum(g) / len(g)) if g else float('nan'), len(g)))
PY
tar -czf $OUT/logs.tgz -C $OUT racecheck-mbar.log racecheck-base.log test-mbar.log timing-base.txt timing-mbar.txt &&
  rm -f $OUT/racecheck-*.log $OUT/test-mbar.log $OUT/timing-*.txt
el done
