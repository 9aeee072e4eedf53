#!/usr/bin/env bash
# session 31, call 4, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s31/call4.sh
# The seesaw kernel's WG0 at the end of a pair, after call 3's profile (WG1 waited 8.3% of the
# samples for block 0 of its next tile, which WG0 refilled last):
#   v1 (patches/v1-refill-split.patch on the base, without the descriptor change): stage 1's
#      blocks 0..3 refilled right after
#      WG0's P_B V_B, before the wait for WG1's (hand-over S1), which reads only blocks 4..8;
#   t  (this tree: eed3ce0 with patches/v2-s-ahead.patch, v1 included): also S of the next
#      tile A issued
#      at the end of the pair, its blocks 0..3 under the P_B V_B (FlashMLA's order), 4..8 after
#      the refills.
# test_sm90_gpu and the layouts test on t and v1; sm90_timing 15 of base (HEAD of the device
# copy: a7a833d, the session's first commit, before eed3ce0's descriptor change, which call 2
# measured at 0.977-0.978x), v1 and t, two rounds; the FP8 seesaw tests on t.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/base /tmp/v1 && mkdir -p /tmp/base /tmp/v1 && git archive HEAD | tar -x -C /tmp/base &&
  git archive HEAD | tar -x -C /tmp/v1 && (cd /tmp/v1 && patch -p1 -s < $OLDPWD/bench/results/2026-12-02-h200-s31/patches/v1-refill-split.patch) || echo "v1 patch failed"
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j4 --target sm90_timing >> base.log 2>&1; } &
{ cmake -S /tmp/v1 -B build-v1 $cfg > v1.log 2>&1 && cmake --build build-v1 -j5 --target sm90_timing test_sm90_gpu >> v1.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j7 --target test_sm90_gpu sm90_timing test_sm90_layouts_gpu test_fp8 >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
timeout $(lim 40) build-t/tests/test_sm90_layouts_gpu > layouts.log 2>&1; echo "layouts rc=$? $(grep -c PASS layouts.log) PASS $(grep -c FAIL layouts.log) FAIL"
for k in t v1; do
  MLAV_SM90_CASES=6 timeout $(lim 120) build-$k/tests/test_sm90_gpu > test_sm90-$k.log 2>&1; echo "test_sm90_gpu $k rc=$?"
  echo "ss runs: $(grep -c '^  ss ' test_sm90-$k.log) ok: $(grep '^  ss ' test_sm90-$k.log | grep -c ': ok')"
done
for r in 1 2; do for k in base v1 t; do
  el timing $k $r
  timeout $(lim 30) build-$k/tests/sm90_timing 15 > timing-$k-$r.txt 2>&1; echo "rc=$? $(tail -1 timing-$k-$r.txt)"
done; done
python3 - . <<'PY' | tee $OUT/timing-ab.txt
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
    b = rows("%s/timing-base-%d.txt" % (d, r))
    vs = {k: rows("%s/timing-%s-%d.txt" % (d, k, r)) for k in ("v1", "t")}
    print("round %d: sm90/64 column (us): base (a7a833d), v1, t; v1/base, t/base" % r)
    for k in b:
        if all(k in v for v in vs.values()):
            print("%-28s %8.1f %8.1f %8.1f  %.3f %.3f" % (k, b[k], vs['v1'][k], vs['t'][k], vs['v1'][k] / b[k], vs['t'][k] / b[k]))
    for name, v in vs.items():
        g = [math.log(v[k] / b[k]) for k in b if k in v and ' 64 chain' in k]
        o = [math.log(v[k] / b[k]) for k in b if k in v and ' 64 chain' not in k]
        if g: print("round %d %s/base geomean over %d chain page-64 points: %.3f; the %d tree and page-1 points: %.3f" % (r, name, len(g), math.exp(sum(g) / len(g)), len(o), math.exp(sum(o) / max(1, len(o)))))
PY
el "test_fp8 (seesaw family)"
MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw timeout $(lim 100) build-t/tests/test_fp8 > test_fp8.log 2>&1; echo "test_fp8 seesaw rc=$? $(grep -E 'PASSED|FAILED' test_fp8.log | tail -2 | tr '\n' ' ')"
cp timing-t-2.txt $OUT/
tar -czf $OUT/logs.tgz *.log timing-*.txt
el done
