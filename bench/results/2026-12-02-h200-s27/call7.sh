#!/usr/bin/env bash
# call 7: this tree (the producer's three feeds: the early page-id lookup only over pages of at
# least 64 rows) against 8692a72 (.ab-base): sm90_timing of each, then test_sm90_gpu
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { local s=$1 d=$2; shift 2
  { cmake -S $s -B $d $cfg > $d.log 2>&1 && cmake --build $d -j8 --target "$@" >> $d.log 2>&1; } ||
    { echo "$d failed"; grep -m5 error $d.log; }; }
el build
b .ab-base/8692a72 build-base sm90_timing & b . build-new sm90_timing test_sm90_gpu & wait
el timing
for v in base new; do timeout 40 build-$v/tests/sm90_timing 15 > $OUT/timing-$v.txt 2>&1; echo "$v rc=$?"; done
python3 - $OUT <<'PY' | tee $OUT/ab.txt
import sys, math
def rows(f):
    r = {}
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            v = a[1].split(); r[' '.join(a[0].split())] = float(v[3])
    return r
d = sys.argv[1]; A = rows(d + '/timing-base.txt'); B = rows(d + '/timing-new.txt')
l = []; l1 = []
for k in A:
    r = B[k] / A[k]; l.append(math.log(r))
    if k.split()[4] == '1': l1.append(math.log(r))
    print("%-26s %9.1f %9.1f %7.3f" % (k, A[k], B[k], r))
print("geomean new/base (sm90/64): %.3f over %d points; page_size 1 points %.3f" % (math.exp(sum(l) / len(l)), len(l), math.exp(sum(l1) / len(l1))))
PY
el test_sm90_gpu; timeout 100 build-new/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|\[  ERROR" $OUT/test_sm90.log
el done
