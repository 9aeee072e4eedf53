#!/usr/bin/env bash
# call 4: the ring's publish granularity, one call: sm90_timing of the whole-tile ring
# (.ab-base/207b1a9) and of this tree with 9 (MLAV90_PUBLISH_BLOCKS=9: one barrier a stage, the
# early release alone), 3 and 1 column blocks per "full" barrier
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { cmake -S $1 -B $2 $cfg -DCMAKE_CUDA_FLAGS="$3" > $2.log 2>&1 && cmake --build $2 -j8 --target sm90_timing >> $2.log 2>&1 || { echo "$2 failed"; grep -m5 error $2.log; }; }
b .ab-base/207b1a9 build-base "" & b . build-p9 "-DMLAV90_PUBLISH_BLOCKS=9" & b . build-p3 "-DMLAV90_PUBLISH_BLOCKS=3" & b . build-p1 "-DMLAV90_PUBLISH_BLOCKS=1" & wait
for v in base p9 p3 p1; do el "timing $v"; timeout 100 build-$v/tests/sm90_timing 12 > $OUT/timing-$v.txt 2>&1; echo "rc=$?"; tail -2 $OUT/timing-$v.txt | cut -c1-120; done
python3 - $OUT <<'PY'
import sys,math
def rows(f):
    r={}
    for l in open(f):
        a=l.split('|')
        if len(a)>2 and a[0].split() and a[0].split()[0].isdigit():
            v=a[1].split(); r[' '.join(a[0].split())]=(float(v[0]),float(v[1]))
    return r
d=sys.argv[1]; V=['base','p9','p3','p1']; R={v:rows(d+'/timing-%s.txt'%v) for v in V}
print("%-26s"%"point"+"".join("%9s"%v for v in V)+"  base/p9 base/p3 base/p1")
lg={v:[] for v in V[1:]}
for k in R['base']:
    t=[R[v][k][1] for v in V]
    for v,x in zip(V[1:],t[1:]): lg[v].append(math.log(t[0]/x))
    print("%-26s"%k+"".join("%9.1f"%x for x in t)+"".join("%8.3f"%(t[0]/x) for x in t[1:]))
print("geomean base/variant: "+", ".join("%s %.3f"%(v,math.exp(sum(l)/len(l))) for v,l in lg.items()))
PY
el done
