#!/usr/bin/env bash
# call 5: the ring in parts (the alternate consume releases its stage in halves; this tree) against the whole-tile ring (.ab-base/207b1a9,
# s25-sm90v2 merged with main), sm90_timing of both trees in one call (base first; the legal
# kernel, unchanged between them, is each run's reference), then this tree's layout check and
# test_sm90_gpu (legal / sm90 / sm90alt against the oracle)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
cmake -S . -B build-d $cfg > build-d.log 2>&1
cmake -S .ab-base/207b1a9 -B build-base $cfg > build-base.log 2>&1
(cmake --build build-d -j8 --target test_sm90_layouts_gpu sm90_timing test_sm90_gpu >> build-d.log 2>&1 || { grep -E "error" build-d.log | head -30; }) &
(cmake --build build-base -j8 --target sm90_timing >> build-base.log 2>&1 || { grep -E "error" build-base.log | head -30; }) & wait
el layouts
timeout 60 build-d/tests/test_sm90_layouts_gpu > $OUT/layouts.log 2>&1; echo "layouts rc=$?"; tail -2 $OUT/layouts.log
el timing-base
timeout 150 build-base/tests/sm90_timing 15 > $OUT/timing-base.txt 2>&1; echo "rc=$?"; tail -3 $OUT/timing-base.txt
el timing-new
timeout 150 build-d/tests/sm90_timing 15 > $OUT/timing-new.txt 2>&1; echo "rc=$?"; tail -3 $OUT/timing-new.txt
python3 - $OUT/timing-base.txt $OUT/timing-new.txt <<'PY'
import sys,math
def rows(f):
    r={}
    for l in open(f):
        if '|' in l and l.split('|')[0].split() and l.split()[0].isdigit():
            a=l.split('|'); k=' '.join(a[0].split()); v=a[1].split(); w=a[2].split()
            r[k]=(float(v[0]),float(v[1]),float(w[0]))
    return r
b=rows(sys.argv[1]); n=rows(sys.argv[2]); ls=[];la=[]
print("%-32s %9s %9s %7s %9s %9s %7s %7s"%("point","base_sm90","new_sm90","b/n","base_alt","new_alt","b/n","legal"))
for k in b:
    if k in n:
        r=b[k][1]/n[k][1]; ra=b[k][2]/n[k][2]; ls.append(math.log(r)); la.append(math.log(ra))
        print("%-32s %9.1f %9.1f %7.3f %9.1f %9.1f %7.3f %7.3f"%(k,b[k][1],n[k][1],r,b[k][2],n[k][2],ra,b[k][0]/n[k][0]))
print("geomean base/new: sm90 %.3f, alt %.3f over %d points"%(math.exp(sum(ls)/len(ls)),math.exp(sum(la)/len(la)),len(ls)))
PY
el sm90-tests
timeout 200 build-d/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90 rc=$?"; grep -E "PASSED|FAILED|\[  ERROR|FAIL" $OUT/test_sm90.log | head -20
el done
