#!/usr/bin/env bash
# calls 2-4: the session's three variants of the sm_90a kernel against main in one process each,
# one call: each variant is main's tree (9090745) with its branch's patch (.abp/<name>.patch)
# built with its macro; sm90_timing 15 of all, interleaved, two rounds; then test_sm90_gpu
# (MLAV_SM90_CASES=8) and the layout check of each variant
#   usage: bash call2.sh "name:MACRO=1 name2:MACRO2=1 ..."
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
VARS=${1:?variants}
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { local s=$1 d=$2 f=$3; shift 3
  { cmake -S $s -B $d $cfg -DCMAKE_CUDA_FLAGS="$f" > $d.log 2>&1 && cmake --build $d -j6 --target "$@" >> $d.log 2>&1; } ||
    { echo "$d failed"; grep -m8 -E "error|Error" $d.log; }; }
el build
b . build-base "" sm90_timing &
names=base
for v in $VARS; do
  n=${v%%:*}; m=${v#*:}
  rm -rf ab-$n; mkdir ab-$n; git archive HEAD -- . ':!golden' ':!bench/results' | tar -x -C ab-$n
  # outside any repository (ab-* lies inside the checkout, where git apply would skip the paths)
  GIT_CEILING_DIRECTORIES=$PWD git -C ab-$n apply ../.abp/$n.patch || { echo "patch $n failed"; continue; }
  echo "$n: $(diff -rq . ab-$n -x 'ab-*' -x 'build*' -x golden -x bench -x .git -x '.abp' -x '.debs' 2>/dev/null | grep -c differ) files differ from the base"
  b ab-$n build-$n "-D$m" sm90_timing test_sm90_gpu test_sm90_layouts_gpu &
  names="$names $n"
done
wait
el sass
for n in $names; do o=$(find build-$n -name 'launch_sm90.cu.o' | head -1); [ -n "$o" ] || continue
  cuobjdump -sass -fun '_ZN6mlav9017flash_sm90_kernelI13__nv_bfloat16S1_Lb0EEEv17mlav_flash_params14CUtensorMap_sti' $o > $OUT/sass-$n.txt 2>/dev/null
  echo "$n: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' $OUT/sass-$n.txt) instructions, $(grep -c HGMMA $OUT/sass-$n.txt) HGMMA, $(grep -cE ' U(LOP3|IADD3|SHF|MOV)' $OUT/sass-$n.txt) ULOP3/UIADD3/USHF/UMOV"
done
el timing
for round in a b; do for n in $names; do
  [ -x build-$n/tests/sm90_timing ] || continue
  timeout 60 build-$n/tests/sm90_timing 15 > $OUT/timing-$n-$round.txt 2>&1; echo "$n$round rc=$? $(tail -1 $OUT/timing-$n-$round.txt)"
done; done
python3 - $OUT $names <<'PY' | tee $OUT/ab.txt
import sys, math, os
def rows(f):
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            v = a[1].split(); r[' '.join(a[0].split())] = (float(v[0]), float(v[1]), float(v[3]))
    return r
d, names = sys.argv[1], sys.argv[2:]
R = {(n, x): rows('%s/timing-%s-%s.txt' % (d, n, x)) for n in names for x in 'ab'}
base = {k: (R[('base', 'a')][k][2] * R[('base', 'b')][k][2]) ** 0.5 for k in R[('base', 'a')]}
vs = [n for n in names if n != 'base' and R[(n, 'a')]]
print("sm90/64 column (the family's schedule): base us (geomean of 2 rounds), variant time / base time per round")
print("%-26s %8s " % ("point", "base") + " ".join("%7s %7s" % (n + "-a", n + "-b") for n in vs) + "  base-b/a")
g = {n: [] for n in vs}; gb = []
for k in base:
    r = []
    for n in vs:
        ra = R[(n, 'a')].get(k, (0, 0, float('nan')))[2] / base[k]; rb = R[(n, 'b')].get(k, (0, 0, float('nan')))[2] / base[k]
        r += [ra, rb]; g[n] += [math.log(ra), math.log(rb)]
    bb = R[('base', 'b')][k][2] / R[('base', 'a')][k][2]; gb.append(math.log(bb))
    print("%-26s %8.1f " % (k, base[k]) + " ".join("%7.3f" % x for x in r) + "  %7.3f" % bb)
m = lambda l: math.exp(sum(l) / len(l)) if l else float('nan')
print("geomean variant / base time: " + ", ".join("%s %.3f" % (n, m(g[n])) for n in vs) + "; base b/a %.3f (%d points)" % (m(gb), len(base)))
PY
el tests
for n in $names; do [ $n = base ] && continue
  echo "== $n layouts"; timeout 60 build-$n/tests/test_sm90_layouts_gpu 2>&1 | grep -E "FAIL|^PASS|passed|failed" | tail -3
  echo "== $n test_sm90_gpu"; MLAV_SM90_CASES=8 timeout 120 build-$n/tests/test_sm90_gpu > $OUT/test-$n.log 2>&1; echo "rc=$?"
  grep -E "seed|PASSED|FAILED|\[  ERROR" $OUT/test-$n.log | head -12
done 2>&1 | tee $OUT/tests.txt
tar -czf $OUT/timing.tgz -C $OUT $(cd $OUT && ls timing-*.txt sass-*.txt) && rm -f $OUT/timing-*.txt $OUT/sass-*.txt
el done
