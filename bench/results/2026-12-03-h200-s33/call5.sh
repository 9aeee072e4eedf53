#!/usr/bin/env bash
# session 33, call 5, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-03-h200-s33/call5.sh
# t: 15254e3 + lead-rows.patch (WG1's S from block 4 only where the request has more than 64
# rows, so that several blocks read each tile; from block 0 where one block streams each tile,
# the memory-bound points call 4 slowed by 1.5-2.8%). Base: t with the patch reversed (15254e3).
# test_sm90_gpu on t; sm90_timing 15 of both, two rounds.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
d=bench/results/2026-12-03-h200-s33
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r $(git ls-files | cut -d/ -f1 | sort -u) /tmp/base/ 2>/dev/null
(cd /tmp/base && patch -R -p1 -s < $OLDPWD/$d/lead-rows.patch) && echo "base: patch reversed"
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j6 --target sm90_timing >> base.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j10 --target test_sm90_gpu sm90_timing >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
MLAV_SM90_CASES=6 timeout 120 build-t/tests/test_sm90_gpu > test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' test_sm90.log) ok: $(grep '^  ss ' test_sm90.log | grep -c ': ok') $(grep -E 'PASSED|FAILED' test_sm90.log | tail -2 | tr '\n' ' ')"
for r in 1 2; do for k in base t; do
  el timing $k $r
  timeout 30 build-$k/tests/sm90_timing 15 > timing-$k-$r.txt 2>&1; echo "rc=$? $(tail -1 timing-$k-$r.txt)"
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
for r in (1, 2):
    b, n = rows("timing-base-%d.txt" % r), rows("timing-t-%d.txt" % r)
    ks = [k for k in n if k in b]
    print("round %d: sm90/64 column (us): base (15254e3), t (lead-rows)" % r)
    for k in ks:
        print("%-28s base %8.1f new %8.1f  new/base %.3f" % (k, b[k], n[k], n[k] / b[k]))
    g = [math.log(n[k] / b[k]) for k in ks]
    if g: print("round %d geomean new/base over %d points: %.3f" % (r, len(g), math.exp(sum(g) / len(g))))
PY
tar -czf $OUT/logs.tgz *.log timing-*-?.txt
el done
