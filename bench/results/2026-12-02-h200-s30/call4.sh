#!/usr/bin/env bash
# session 30, call 4, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s30/call4.sh
# The seesaw kernel's row map (page sizes that are not whole tiles: a TMA box a row, swizzled by
# its shared address, the NaN row's map, rows past the end outside the tensor), its reader's
# proxy fence only for cp.async tiles (a flag carried a pair), FP8 caches to the sm_90a family
# from 8 tiles an SM: (1) test_sm90_layouts_gpu (the row boxes byte for byte), test_kernel_rules,
# test_sm90_gpu; (2) sm90_timing 15 of the base tree (HEAD of the device copy, 15e5b37) and of
# this one, two rounds; (3) bench page_size 1 against 64, BF16, B 16 and 1.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
rm -rf /tmp/base && mkdir -p /tmp/base && git archive HEAD | tar -x -C /tmp/base
echo "base: $(git rev-parse HEAD)"
cfg() { cmake -S $1 -B $2 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF; }
{ cfg /tmp/base build-base > base.log 2>&1 && cmake --build build-base -j6 --target sm90_timing >> base.log 2>&1; } &
{ cfg . build-s30 > build.log 2>&1 && cmake --build build-s30 -j10 --target mlaverify_cli test_sm90_gpu sm90_timing test_sm90_layouts_gpu test_kernel_rules >> build.log 2>&1; } ||
  { echo "build failed"; grep -m12 -E "error|Error" build.log; }
wait
grep -E "spill" build.log | sort | uniq -c | head -4
el built
build-s30/tests/test_kernel_rules > $OUT/rules.log 2>&1; echo "test_kernel_rules rc=$?"
timeout $(lim 60) build-s30/tests/test_sm90_layouts_gpu > $OUT/layouts.log 2>&1; echo "test_sm90_layouts_gpu rc=$?"
grep -E "^tma|FAIL" $OUT/layouts.log | head -16
MLAV_SM90_CASES=6 timeout $(lim 150) build-s30/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
grep -E "PASSED|FAILED|\[  ERROR|\[  FAILED" $OUT/test_sm90.log | head -6
echo "ss runs: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
grep '^  ss ' $OUT/test_sm90.log | grep -v ': ok' | head -4
for r in 1 2; do for k in base s30; do
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
t = {(k, r): rows("%s/timing-%s-%d.txt" % (d, k, r)) for k in ("base", "s30") for r in (1, 2)}
ks = [k for k in t[("s30", 1)] if all(k in v for v in t.values())]
print("sm90/64 column (us), two rounds: base (15e5b37), this tree; ratios to base")
for k in ks:
    b = [t[("base", r)][k] for r in (1, 2)]
    n = [t[("s30", r)][k] for r in (1, 2)]
    print("%-28s base %8.1f %8.1f  new %8.1f %8.1f  new/base %.3f %.3f" % (k, b[0], b[1], n[0], n[1], n[0] / b[0], n[1] / b[1]))
for r in (1, 2):
    g = [math.log(t[("s30", r)][k] / t[("base", r)][k]) for k in ks if ' 64 chain' in k]
    print("round %d geomean new/base over %d chain page-64 points: %.3f" % (r, len(g), math.exp(sum(g) / len(g))))
PY
el "bench page 1 / 64"
for ps in 64 1; do
  for b in 16 1; do
    timeout $(lim 60) build-s30/mlaverify bench --backend cuda --batch $b --heads 8,16,128 --qlen 1,16 --prefix 32768,131072 \
      --page-size $ps --reps 20 --min-reps 10 --csv $OUT/page$ps-b$b.csv > $OUT/page$ps-b$b.txt 2>&1; echo "rc=$?"
  done
done
{ echo "batch,heads,q_len,prefix,page64_us,page1_us,page1/page64"
  for b in 16 1; do join -t, <(awk -F, 'NR>1 && $1=="cuda" {print $3"|"$4"|"$5"|"$6","$9}' $OUT/page64-b$b.csv | sort) \
      <(awk -F, 'NR>1 && $1=="cuda" {print $3"|"$4"|"$5"|"$6","$9}' $OUT/page1-b$b.csv | sort) |
      awk -F'[|,]' '{printf "%s,%s,%s,%s,%.1f,%.1f,%.3f\n", $1,$2,$3,$4,$5,$6,$6/$5}'; done; } | tee $OUT/page-ab.txt
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log timing-*-?.txt page*-b*.txt page*-b*.csv 2>/dev/null) && (cd $OUT && rm -f *.log timing-*-?.txt page*-b*.txt page*-b*.csv)
el done
