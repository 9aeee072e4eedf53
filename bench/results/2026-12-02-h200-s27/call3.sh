#!/usr/bin/env bash
# call 3: this tree (e9f512e: TMA tiles in blocks of a request of more than 64 rows, the producer
# without the TMA path its own instance) against main before it (43c1feb, .ab-base) and against
# itself with the TMA path compiled out (MLAV90_TMA=0: the page-id lookup before the stage wait
# alone): sm90_timing, interleaved; then test_sm90_gpu, test_sm90_layouts_gpu, golden (sm90)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { local s=$1 d=$2 f=$3; shift 3
  { cmake -S $s -B $d $cfg -DCMAKE_CUDA_FLAGS="$f" > $d.log 2>&1 && cmake --build $d -j8 --target "$@" >> $d.log 2>&1; } ||
    { echo "$d failed"; grep -m5 error $d.log; }; }
b .ab-base/43c1feb build-base "" sm90_timing &
b . build-new "" sm90_timing test_sm90_gpu test_sm90_layouts_gpu mlaverify_cli &
b . build-t0 "-DMLAV90_TMA=0" sm90_timing &
wait
el timing
for v in base new t0 baseb newb; do
  timeout 60 build-${v%b}/tests/sm90_timing 15 > $OUT/timing-$v.txt 2>&1; echo "$v rc=$? $(tail -1 $OUT/timing-$v.txt)"
done
python3 - $OUT <<'PY' | tee $OUT/ab.txt
import sys, math
def rows(f):
    r = {}
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            v = a[1].split(); r[' '.join(a[0].split())] = (float(v[0]), float(v[1]), float(v[3]))
    return r
d = sys.argv[1]
V = ('base', 'new', 't0', 'baseb', 'newb')
R = {v: rows(d + '/timing-%s.txt' % v) for v in V}
print("sm90/64 column (the sm90 family's own schedule), us; ratios of time")
print("%-26s %8s %8s %8s %8s %8s %7s %7s %7s %8s" % (("point",) + V + ("new/base", "nb/bb", "t0/base", "legal/new")))
g = {x: [] for x in ("nb", "nbb", "t0", "lg")}
for k in R['base']:
    a, n, t, ab, nb = (R[v][k][2] for v in V)
    r = (n / a, nb / ab, t / a, R['new'][k][0] / n)
    for x, y in zip(g, r): g[x].append(math.log(y))
    print("%-26s %8.1f %8.1f %8.1f %8.1f %8.1f %7.3f %7.3f %7.3f %8.3f" % ((k, a, n, t, ab, nb) + r))
m = lambda l: math.exp(sum(l) / len(l))
print("geomean new/base %.3f, again %.3f; t0/base %.3f; legal/new %.3f (56 points)" % (m(g["nb"]), m(g["nbb"]), m(g["t0"]), m(g["lg"])))
PY
el tests
{
echo "== layouts"; timeout 60 build-new/tests/test_sm90_layouts_gpu 2>&1 | grep -E "^tma |FAIL|^PASS" | tail -9; echo "rc=${PIPESTATUS[0]}"
echo "== test_sm90_gpu"; timeout 150 build-new/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "rc=$?"
grep -E "seed|PASSED|FAILED|\[  ERROR" $OUT/test_sm90.log | head -20
for fam in sm90 default; do
  echo "== golden ($fam)"; MLAV_FLASH_FAMILY=$([ $fam = default ] && echo "" || echo $fam) timeout 100 build-new/mlaverify check --backend cuda golden 2>&1 | tail -1; echo "rc=${PIPESTATUS[0]}"
done
} 2>&1 | tee $OUT/tests.txt
el done
