#!/usr/bin/env bash
# session 31, call 2, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s31/call2.sh
# wgmma descriptors as a low word per operand base stepped by one add (wgmma.cuh desc_at), where
# each was built whole from its address (11 uniform instructions a wgmma in call 1's profile):
# the SASS of the seesaw kernel's S in both trees; test_sm90_gpu and the layouts test;
# sm90_timing 15 of the base tree (HEAD of the device copy) and of this one, two rounds;
# mlaverify bench BF16 and FP8 at 16 points in both; the engine path (production preset,
# --engine 1.5) of this tree.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/base && mkdir -p /tmp/base && git archive HEAD | tar -x -C /tmp/base
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j6 --target sm90_timing mlaverify_cli >> base.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j10 --target test_sm90_gpu sm90_timing test_sm90_layouts_gpu mlaverify_cli >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
for k in base t; do
  lib=$(ls build-$k/libmlaverify.so* 2>/dev/null | head -1); [ -n "$lib" ] || lib=build-$k/mlaverify
  cuobjdump -sass -fun '_ZN6mlav906seesaw24flash_sm90_seesaw_kernelI13__nv_bfloat16S2_Lb0EEEv17mlav_flash_params14CUtensorMap_sti' $lib > sass-$k.log 2>&1
  python3 - sass-$k.log $k <<'PY' | tee -a $OUT/sass.txt
import sys, re
ins = [l.split(';')[0].split('*/', 1)[-1].strip() for l in open(sys.argv[1]) if re.match(r'\s*/\*[0-9a-f]{4}\*/', l)]
ins = [re.sub(r'^@!?U?P\w+\s+', '', i) for i in ins]
ops = [i.split()[0] if i else '' for i in ins]
hg = [n for n, o in enumerate(ops) if o == 'HGMMA.64x64x16.F32.BF16']
u = sum(1 for o in ops if o.startswith('U'))
gaps = [hg[i + 1] - hg[i] - 1 for i in range(len(hg) - 1) if hg[i + 1] - hg[i] < 20]
print("%s: %d instructions, %d uniform, %d m64n64k16 HGMMA, instructions between consecutive S HGMMAs: %s" %
      (sys.argv[2], len(ins), u, len(hg), sorted(set(gaps))))
if len(hg) > 2:
    print("  between HGMMA 1 and 2:", ' | '.join(ins[hg[1] + 1:hg[2]]))
PY
done
timeout $(lim 40) build-t/tests/test_sm90_layouts_gpu > $OUT/layouts.log 2>&1; echo "layouts rc=$? $(grep -c PASS $OUT/layouts.log) PASS $(grep -c FAIL $OUT/layouts.log) FAIL"
MLAV_SM90_CASES=6 timeout $(lim 120) build-t/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
for r in 1 2; do for k in base t; do
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
for r in (1, 2):
    b, n = rows("%s/timing-base-%d.txt" % (d, r)), rows("%s/timing-t-%d.txt" % (d, r))
    ks = [k for k in n if k in b]
    print("round %d: sm90/64 column (us): base (a7a833d), this tree" % r)
    for k in ks:
        print("%-28s base %8.1f new %8.1f  new/base %.3f" % (k, b[k], n[k], n[k] / b[k]))
    g = [math.log(n[k] / b[k]) for k in ks if ' 64 chain' in k]
    if g: print("round %d geomean new/base over %d chain page-64 points: %.3f" % (r, len(g), math.exp(sum(g) / len(g))))
PY
for k in base t; do for b in 1 16; do
  el "bench $k B $b bf16,fp8"
  timeout $(lim 60) build-$k/mlaverify bench --backend cuda --batch $b --heads 8,128 --qlen 1,16 \
    --prefix 32768,131072 --page-size 64 --kv-dtype bf16,fp8 --reps 20 --min-reps 10 \
    --csv $OUT/fp8-$k-$b.csv > fp8-$k-$b.log 2>&1; echo "rc=$?"
done; done
python3 - $OUT <<'PY' | tee $OUT/fp8-ab.txt
import sys, csv, math, os
d = sys.argv[1]
def load(k):
    r = {}
    for b in (1, 16):
        f = "%s/fp8-%s-%d.csv" % (d, k, b)
        if not os.path.exists(f): continue
        for x in csv.DictReader(open(f)):
            if x['backend'] == 'cuda':
                r[(x['batch'], x['heads'], x['q_len'], x['prefix'], x['kv_dtype'])] = float(x['time_us'])
    return r
b, n = load("base"), load("t")
g = {}
for k in sorted(n, key=lambda k: (k[4], int(k[0]), int(k[1]), int(k[2]), int(k[3]))):
    if k in b:
        print("%-34s base %8.1f new %8.1f new/base %.3f" % (' '.join(k), b[k], n[k], n[k] / b[k]))
        g.setdefault(k[4], []).append(math.log(n[k] / b[k]))
for dt, v in g.items(): print("geomean new/base %s over %d points: %.3f" % (dt, len(v), math.exp(sum(v) / len(v))))
PY
el "engine (production, --engine 1.5)"
timeout $(lim 200) build-t/mlaverify bench --backend cuda --preset production --engine 1.5 \
  --engine-csv $OUT/engine.csv --csv engine-exact.csv > engine.log 2>&1; echo "rc=$?"
python3 - $OUT/engine.csv <<'PY' | tee $OUT/engine.txt
import sys, csv, math
rs = list(csv.DictReader(open(sys.argv[1])))
for c in ('run_over_exact',):
    v = [float(r[c]) for r in rs]
    print("%d points: run / exact geomean %.3f (%.3f-%.3f)" % (len(v), math.exp(sum(map(math.log, v)) / len(v)), min(v), max(v)))
st = [float(r['step_us']) / float(r['exact_us']) for r in rs]
print("step (update + run) / exact geomean %.3f (%.3f-%.3f)" % (math.exp(sum(map(math.log, st)) / len(st)), min(st), max(st)))
for r in sorted(rs, key=lambda r: -float(r['run_over_exact']))[:8]:
    print("  worst: B %s H %s q_len %s prefix %s: exact %s run %s step %s (%s)" % (r['batch'], r['heads'], r['q_len'], r['prefix'], r['exact_us'], r['run_us'], r['step_us'], r['run_over_exact']))
PY
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log timing-*-?.txt 2>/dev/null) -C "$PWD" $(ls *.log 2>/dev/null | grep -v -e base.log -e build-t.log) && (cd $OUT && rm -f *.log timing-*-?.txt)
el done
