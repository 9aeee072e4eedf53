#!/usr/bin/env bash
# call 1: one A/B of four builds of the sm_90a kernel (sm90_timing, 15 replays, L2 flushed):
#   main    this tree (the L2 prefetch only over pages >= a tile, be637ea)
#   e6      e6f43f6 (the prefetch over every page: call 7's 3.4-4.5% gap at page 64 settled)
#   tma0    s26-tma (dbabd3b) with MLAV90_TMA=0: s26-lookup-early's producer (page ids of tile
#           t + 3 looked up before the wait for a free stage), every tile by cp.async
#   tma1    s26-tma as it is: whole tiles inside one page by TMA
# then the correctness of both new producers: test_sm90_gpu (tma1, tma0), test_sm90_layouts_gpu,
# golden on cuda with the sm90 family (tma1), the tensor map's encode cost
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { # src, build dir, cuda flags, targets...
  local s=$1 d=$2 f=$3; shift 3
  { cmake -S $s -B $d $cfg -DCMAKE_CUDA_FLAGS="$f" > $d.log 2>&1 &&
    cmake --build $d -j8 --target "$@" >> $d.log 2>&1; } || { echo "$d failed"; grep -m5 error $d.log; }
}
T=.ab-base/dbabd3b
b . build-main "" sm90_timing &
b .ab-base/e6f43f6 build-e6 "" sm90_timing &
b $T build-tma1 "-DMLAV90_TMA=1" sm90_timing test_sm90_gpu test_sm90_layouts_gpu mlaverify_cli &
b $T build-tma0 "-DMLAV90_TMA=0" sm90_timing test_sm90_gpu test_sm90_layouts_gpu &
wait
el timing
for v in main e6 tma0 tma1 mainb tma1b; do
  d=build-${v%b}; [ "$v" = e6 ] && d=build-e6
  timeout 60 $d/tests/sm90_timing 15 > $OUT/timing-$v.txt 2>&1; echo "$v rc=$? $(tail -1 $OUT/timing-$v.txt)"
done
python3 - $OUT <<'PY'
import sys, math
def rows(f):
    r = {}
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            v = a[1].split(); r[' '.join(a[0].split())] = (float(v[0]), float(v[1]), float(v[3]))
    return r
d = sys.argv[1]
R = {v: rows(d + '/timing-%s.txt' % v) for v in ('main', 'e6', 'tma0', 'tma1', 'mainb', 'tma1b')}
pairs = [('e6', 'main'), ('mainb', 'main'), ('tma0', 'main'), ('tma1', 'tma0'), ('tma1', 'main'),
         ('tma1b', 'mainb'), ('tma1b', 'tma1')]
print("time ratios a/b per point, sm90 column (sm90/64 column geomean at the end)")
print("%-26s %8s %8s %8s" % ("point", "main", "tma1", "legal") + "".join(" %11s" % ("%s/%s" % p) for p in pairs))
for k in R['main']:
    print("%-26s %8.1f %8.1f %8.1f" % (k, R['main'][k][1], R['tma1'][k][1], R['main'][k][0]) +
          "".join(" %11.3f" % (R[a][k][1] / R[b][k][1]) for a, b in pairs))
for col, name in ((1, 'sm90'), (2, 'sm90/64')):
    g = []
    for a, b in pairs:
        l = [math.log(R[a][k][col] / R[b][k][col]) for k in R['main']]
        g.append(math.exp(sum(l) / len(l)))
    print("geomean %-7s" % name + "".join(" %s/%s=%.3f" % (a, b, x) for (a, b), x in zip(pairs, g)))
PY
el tests
{
for v in 1 0; do
  echo "== layouts tma$v"; timeout 60 build-tma$v/tests/test_sm90_layouts_gpu 2>&1 | grep -E "^tma |FAIL|PASS|seed|rc" | tail -12; echo "rc=${PIPESTATUS[0]}"
done
for v in 1 0; do
  echo "== test_sm90_gpu tma$v"; timeout 150 build-tma$v/tests/test_sm90_gpu > $OUT/test_sm90-tma$v.log 2>&1; echo "rc=$?"
  grep -E "seed|PASSED|FAILED|\[  ERROR|FAIL" $OUT/test_sm90-tma$v.log | head -20
done
echo "== golden (tma1, sm90 family)"; MLAV_FLASH_FAMILY=sm90 timeout 120 build-tma1/mlaverify check --backend cuda golden 2>&1 | tail -4; echo "rc=${PIPESTATUS[0]}"
} 2>&1 | tee $OUT/tests.txt
el done
