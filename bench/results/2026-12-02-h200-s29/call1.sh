#!/usr/bin/env bash
# session 29, call 1, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s29/call1.sh
# (1) session 28's question: racecheck on the seesaw kernel with its named-barrier hand-overs
#     (base) and with MLAV90_SEESAW_MBAR=1 (mbarriers), the latter's tests;
# (2) what holds the copy-bound points (B 16, q_len 1) at ~0.75 of copy: builds of one tree with
#     the L2 prefetch off (pf0), TMA with an evict_first policy (ef), the seesaw's page ids
#     looked up a pair ahead (ids), all three (all); sm90_timing 15 of each under the seesaw rule
#     (MLAV_SM90_KERNEL=auto) and with the seesaw kernel forced, interleaved.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { local d=$1 f=$2 tg=$3
  { cmake -S . -B $d $cfg -DCMAKE_CUDA_FLAGS="$f" > $d.log 2>&1 &&
    cmake --build $d -j4 --target $tg >> $d.log 2>&1; } ||
    { echo "$d failed"; grep -m8 -E "error|Error" $d.log; }; }
el build
b build-base "" "test_sm90_gpu sm90_timing test_sm90_layouts_gpu" &
b build-mbar "-DMLAV90_SEESAW_MBAR=1" "test_sm90_gpu sm90_timing" &
b build-pf0 "-DMLAV90_L2_PREFETCH=0" "sm90_timing" &
b build-ef "-DMLAV90_TMA_EVICT_FIRST=1" "sm90_timing" &
b build-ids "-DMLAV90_SS_EARLY_IDS=1" "sm90_timing" &
b build-all "-DMLAV90_L2_PREFETCH=0 -DMLAV90_TMA_EVICT_FIRST=1 -DMLAV90_SS_EARLY_IDS=1" "sm90_timing" &
wait
el built
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
el layouts
timeout $(lim 40) build-base/tests/test_sm90_layouts_gpu > $OUT/layouts.log 2>&1; echo "test_sm90_layouts_gpu rc=$?"; tail -3 $OUT/layouts.log
for mode in auto seesaw; do
  for n in base mbar pf0 ef ids all; do
    [ $mode = seesaw ] && [ $n = mbar ] && continue
    el timing $mode $n
    MLAV_SM90_KERNEL=$mode timeout $(lim 30) build-$n/tests/sm90_timing 15 > $OUT/timing-$mode-$n.txt 2>&1
    echo "rc=$? $(tail -1 $OUT/timing-$mode-$n.txt)"
  done
done
python3 - $OUT <<'PY' | tee $OUT/ab.txt
import sys, math, os
def rows(f):  # point -> the sm90/64 column (us)
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            try: r[' '.join(a[0].split())] = float(a[1].split()[3])
            except Exception: pass
    return r
d = sys.argv[1]
for mode, names in (("auto", ["base", "mbar", "pf0", "ef", "ids", "all"]), ("seesaw", ["base", "pf0", "ef", "ids", "all"])):
    t = {n: rows("%s/timing-%s-%s.txt" % (d, mode, n)) for n in names}
    base = t["base"]
    ks = [k for k in base if all(k in t[n] for n in names)]
    print("\nMLAV_SM90_KERNEL=%s: sm90/64 column, base us, then variant / base" % mode)
    print("%-28s %9s " % ("point", "base") + " ".join("%7s" % n for n in names[1:]))
    for k in ks:
        print("%-28s %9.1f " % (k, base[k]) + " ".join("%7.3f" % (t[n][k] / base[k]) for n in names[1:]))
    for sel, f in (("all", lambda k: True), ("q_len 1, B 16", lambda k: k.split()[0] == "16" and k.split()[2] == "1"), ("q_len 16", lambda k: k.split()[2] == "16")):
        kk = [k for k in ks if f(k)]
        if not kk: continue
        print("geomean %-14s (%2d pts): " % (sel, len(kk)) + " ".join("%s %.3f" % (n, math.exp(sum(math.log(t[n][k] / base[k]) for k in kk) / len(kk))) for n in names[1:]))
PY
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls racecheck-*.log test-mbar.log layouts.log timing-*.txt 2>/dev/null) &&
  (cd $OUT && rm -f racecheck-*.log test-mbar.log layouts.log timing-*.txt)
el done
