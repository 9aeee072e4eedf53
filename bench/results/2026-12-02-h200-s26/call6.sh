#!/usr/bin/env bash
# call 6: the producer's L2 prefetch of tile t + 3 on and off (MLAV90_L2_PREFETCH, one tree,
# two builds), sm90_timing of each, on first then off then on again
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { cmake -S . -B $1 $cfg -DCMAKE_CUDA_FLAGS="$2" > $1.log 2>&1 && cmake --build $1 -j8 --target sm90_timing >> $1.log 2>&1 || { echo "$1 failed"; grep -m5 error $1.log; }; }
b build-pf1 "-DMLAV90_L2_PREFETCH=1" & b build-pf0 "-DMLAV90_L2_PREFETCH=0" & wait
for v in pf1 pf0; do el "timing $v"; timeout 100 build-$v/tests/sm90_timing 15 > $OUT/timing-$v.txt 2>&1; echo "rc=$?"; tail -1 $OUT/timing-$v.txt; done
el "timing pf1 again"; timeout 100 build-pf1/tests/sm90_timing 15 > $OUT/timing-pf1b.txt 2>&1; tail -1 $OUT/timing-pf1b.txt
python3 - $OUT <<'PY'
import sys,math
def rows(f):
    r={}
    for l in open(f):
        a=l.split('|')
        if len(a)>2 and a[0].split() and a[0].split()[0].isdigit():
            v=a[1].split(); r[' '.join(a[0].split())]=(float(v[0]),float(v[1]))
    return r
d=sys.argv[1]; A=rows(d+'/timing-pf1.txt'); B=rows(d+'/timing-pf0.txt'); C=rows(d+'/timing-pf1b.txt')
l=[];lc=[]
print("%-26s %9s %9s %9s %8s %8s"%("point","pf1","pf0","pf1b","pf1/pf0","pf1b/pf0"))
for k in A:
    r=A[k][1]/B[k][1]; rc=C[k][1]/B[k][1]; l.append(math.log(r)); lc.append(math.log(rc))
    print("%-26s %9.1f %9.1f %9.1f %8.3f %8.3f"%(k,A[k][1],B[k][1],C[k][1],r,rc))
print("geomean on/off time: %.3f (first), %.3f (again)"%(math.exp(sum(l)/len(l)),math.exp(sum(lc)/len(lc))))
PY
el done
