#!/usr/bin/env bash
# session 30, call 3, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s30/call3.sh
# The FP8 raw tiles in whole 128-byte row pieces (gather.cuh), the seesaw reader's proxy fence
# after every block wait (no stage flag), no page ids carried for tiles inside one page:
# (1) test_sm90_gpu; (2) sm90_timing 15 of the base tree (HEAD of the device copy, 15e5b37), of
# this tree, and of this tree without the reader's fences (nofence: a measurement of their cost
# only, not a correct kernel), two rounds; (3) bench BF16 beside FP8 (default: the seesaw) and
# FP8 on the legal family; (4) Nsight Compute of the FP8 seesaw kernel at B 16, H 8, q_len 1,
# 131072.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
rm -rf /tmp/base /tmp/nofence && mkdir -p /tmp/base /tmp/nofence && git archive HEAD | tar -x -C /tmp/base
echo "base: $(git rev-parse HEAD)"
tar -cf - --exclude='./build*' --exclude=./.git --exclude=./.debs . | tar -x -C /tmp/nofence
python3 - /tmp/nofence/src/cuda/sm90/seesaw.cuh <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = "            mbar_wait_flat(&full[kb], parity);\n            fence_proxy_async();\n"
assert old in s; s = s.replace(old, "            mbar_wait_flat(&full[kb], parity);\n"); open(p, "w").write(s)
PY
cfg() { cmake -S $1 -B $2 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF; }
{ cfg /tmp/base build-base > base.log 2>&1 && cmake --build build-base -j5 --target sm90_timing >> base.log 2>&1; } &
{ cfg /tmp/nofence build-nofence > nofence.log 2>&1 && cmake --build build-nofence -j5 --target sm90_timing >> nofence.log 2>&1; } &
{ cfg . build-s30 > build.log 2>&1 && cmake --build build-s30 -j8 --target mlaverify_cli test_sm90_gpu sm90_timing >> build.log 2>&1; } ||
  { echo "build failed"; grep -m12 -E "error|Error" build.log; }
wait
grep -E "spill" build.log | sort | uniq -c | head -4
for d in base nofence s30; do [ -x build-$d/tests/sm90_timing ] || echo "no sm90_timing in build-$d"; done
el built
MLAV_SM90_CASES=6 timeout $(lim 150) build-s30/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
grep -E "PASSED|FAILED|\[  ERROR|\[  FAILED" $OUT/test_sm90.log | head -6
echo "ss runs: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
grep '^  ss ' $OUT/test_sm90.log | grep -v ': ok' | head -4
for r in 1 2; do for k in base s30 nofence; do
  el timing $k $r
  timeout $(lim 30) build-$k/tests/sm90_timing 15 > $OUT/timing-$k-$r.txt 2>&1; echo "rc=$? $(tail -1 $OUT/timing-$k-$r.txt)"
done; done
python3 - $OUT <<'PY' | tee $OUT/timing-ab.txt
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
t = {(k, r): rows("%s/timing-%s-%d.txt" % (d, k, r)) for k in ("base", "s30", "nofence") for r in (1, 2)}
ks = [k for k in t[("s30", 1)] if all(k in v for v in t.values())]
print("sm90/64 column (us), two rounds: base (15e5b37), this tree, this tree without the reader's fences; ratios to base")
for k in ks:
    b = [t[("base", r)][k] for r in (1, 2)]
    print("%-28s base %8.1f %8.1f  new/base %.3f %.3f  nofence/base %.3f %.3f" % (k, b[0], b[1], t[("s30", 1)][k] / b[0], t[("s30", 2)][k] / b[1], t[("nofence", 1)][k] / b[0], t[("nofence", 2)][k] / b[1]))
for v in ("s30", "nofence"):
    for r in (1, 2):
        g = [math.log(t[(v, r)][k] / t[("base", r)][k]) for k in ks if ' 64 chain' in k]
        print("round %d geomean %s/base over %d chain page-64 points: %.3f" % (r, v, len(g), math.exp(sum(g) / len(g))))
PY
for b in 16 1; do
  el "bench B $b bf16,fp8 (default)"
  timeout $(lim 100) build-s30/mlaverify bench --backend cuda --batch $b --heads 8,16,128 --qlen 1,16 \
    --prefix 4096,32768,131072 --page-size 64 --kv-dtype bf16,fp8 --reps 20 --min-reps 10 \
    --csv $OUT/fp8-b$b.csv > $OUT/fp8-b$b.txt 2>&1; echo "rc=$?"
  el "bench B $b fp8 (legal)"
  MLAV_FLASH_FAMILY=legal timeout $(lim 60) build-s30/mlaverify bench --backend cuda --batch $b --heads 8,16,128 --qlen 1,16 \
    --prefix 4096,32768,131072 --page-size 64 --kv-dtype fp8 --reps 20 --min-reps 10 \
    --csv $OUT/fp8legal-b$b.csv > $OUT/fp8legal-b$b.txt 2>&1; echo "rc=$?"
done
python3 - $OUT <<'PY' | tee $OUT/fp8-ab.txt
import sys, csv, os, math
d = sys.argv[1]
def load(f):
    r = {}
    if not os.path.exists(f): return r
    for row in csv.DictReader(open(f)):
        if row['backend'] != 'cuda': continue
        r[(int(row['batch']), int(row['heads']), int(row['q_len']), int(row['prefix']), row['kv_dtype'])] = float(row['time_us'])
    return r
a = {}; l = {}
for b in (16, 1):
    a.update(load("%s/fp8-b%d.csv" % (d, b))); l.update(load("%s/fp8legal-b%d.csv" % (d, b)))
print("B H q_len prefix: bf16 (default) us, fp8 (default: sm90 seesaw) us, fp8 (legal) us; bf16/fp8, bf16/fp8legal, fp8/fp8legal")
g1 = []; g2 = []
for k in sorted(x for x in a if x[4] == 'bf16'):
    kf = k[:4] + ('fp8_e4m3',)
    if kf in a and kf in l:
        print("%3d %4d %3d %7d  %9.1f %9.1f %9.1f   %.3f %.3f %.3f" % (k[0], k[1], k[2], k[3], a[k], a[kf], l[kf], a[k] / a[kf], a[k] / l[kf], a[kf] / l[kf]))
        g1.append(math.log(a[k] / a[kf])); g2.append(math.log(a[kf] / l[kf]))
if g1: print("geomean bf16/fp8 %.3f, fp8 seesaw/legal %.3f over %d points" % (math.exp(sum(g1)/len(g1)), math.exp(sum(g2)/len(g2)), len(g1)))
PY
el "ncu fp8"
timeout $(lim 100) ncu --clock-control none --section SpeedOfLight --section SourceCounters \
  --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:seesaw --launch-skip 2 -c 1 -f \
  -o $OUT/p1 build-s30/mlaverify bench --batch 16 --heads 8 --qlen 1 --prefix 131072 --kv-dtype fp8 --page-size 64 \
  --reps 6 --min-reps 6 --backend cuda > $OUT/ncu-run.log 2>&1; echo "ncu rc=$?"
ncu -i $OUT/p1.ncu-rep --page details > $OUT/ncu-details-fp8.txt 2>&1; rm -f $OUT/p1.ncu-rep
grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Warp Cycles Per Issued|excessive" $OUT/ncu-details-fp8.txt | head -8
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log timing-*-?.txt fp8-b*.txt fp8legal-*.txt fp8legal-*.csv 2>/dev/null) && (cd $OUT && rm -f *.log timing-*-?.txt fp8-b*.txt fp8legal-*)
el done
