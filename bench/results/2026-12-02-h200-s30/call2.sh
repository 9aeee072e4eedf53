#!/usr/bin/env bash
# session 30, call 2, from the checkout's root with .debs carried and v1.tar (git archive of
# b7ce279, call 1's tree) beside it:
#   bash bench/results/2026-12-02-h200-s30/call2.sh
# (1) sm90_timing 15 of the base tree (HEAD of the device copy, 15e5b37), of call 1's tree (v1)
#     and of this one (row ids only where a tile crosses pages: kv_tile_in_one_page), two rounds;
# (2) test_sm90_gpu on this tree; (3) Nsight Compute of the seesaw kernel over an FP8 cache and
#     over a BF16 page_size 1 pool (gathered refills) at B 16, H 8, q_len 1, 131072, stall
#     samples per SASS instruction; (4) an FP8 cache's bench on v1 and this tree (its conversion
#     reads a row's chunks before writing: fp8_convert_tile<true>); (5) bench BF16 page 1 against
#     page 64 at q_len 1.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
rm -rf /tmp/base /tmp/v1 && mkdir -p /tmp/base /tmp/v1 && git archive HEAD | tar -x -C /tmp/base && tar -xf v1.tar -C /tmp/v1
echo "base: $(git rev-parse HEAD)"
cfg() { cmake -S $1 -B $2 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF; }
{ cfg /tmp/base build-base > base.log 2>&1 && cmake --build build-base -j5 --target sm90_timing >> base.log 2>&1; } &
{ cfg /tmp/v1 build-v1 > v1.log 2>&1 && cmake --build build-v1 -j5 --target sm90_timing mlaverify_cli >> v1.log 2>&1; } &
{ cfg . build-s30 > build.log 2>&1 && cmake --build build-s30 -j8 --target mlaverify_cli test_sm90_gpu sm90_timing >> build.log 2>&1; } ||
  { echo "build failed"; grep -m12 -E "error|Error" build.log; }
wait
for d in base v1 s30; do [ -x build-$d/tests/sm90_timing ] || echo "no sm90_timing in build-$d"; done
el built
MLAV_SM90_CASES=6 timeout $(lim 150) build-s30/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
grep -E "PASSED|FAILED|\[  ERROR|\[  FAILED" $OUT/test_sm90.log | head -6
echo "ss runs: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
for r in 1 2; do for k in base v1 s30; do
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
t = {(k, r): rows("%s/timing-%s-%d.txt" % (d, k, r)) for k in ("base", "v1", "s30") for r in (1, 2)}
ks = [k for k in t[("s30", 1)] if all(k in v for v in t.values())]
print("sm90/64 column (us), two rounds: base (15e5b37), v1 (b7ce279), this tree; ratios to base")
for k in ks:
    b = [t[("base", r)][k] for r in (1, 2)]
    print("%-28s base %8.1f %8.1f  v1/base %.3f %.3f  new/base %.3f %.3f" % (k, b[0], b[1], t[("v1", 1)][k] / b[0], t[("v1", 2)][k] / b[1], t[("s30", 1)][k] / b[0], t[("s30", 2)][k] / b[1]))
for v in ("v1", "s30"):
    for r in (1, 2):
        g = [math.log(t[(v, r)][k] / t[("base", r)][k]) for k in ks if ' 64 chain' in k]
        print("round %d geomean %s/base over %d chain page-64 points: %.3f" % (r, v, len(g), math.exp(sum(g) / len(g))))
PY
n=0
for pt in "--kv-dtype fp8 --page-size 64" "--kv-dtype bf16 --page-size 1"; do
  n=$((n + 1)); el "ncu $n: $pt"
  timeout $(lim 120) ncu --clock-control none --section SpeedOfLight --section SourceCounters \
    --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:seesaw --launch-skip 2 -c 1 -f \
    -o $OUT/p$n build-s30/mlaverify bench --batch 16 --heads 8 --qlen 1 --prefix 131072 $pt \
    --reps 6 --min-reps 6 --backend cuda > $OUT/ncu-run-$n.log 2>&1; echo "ncu rc=$?"
  ncu -i $OUT/p$n.ncu-rep --page details > $OUT/ncu-details-$n.txt 2>&1
  ncu -i $OUT/p$n.ncu-rep --page source --csv --print-source sass > $OUT/src-$n.csv 2>&1 && gzip -f $OUT/src-$n.csv
  rm -f $OUT/p$n.ncu-rep
  grep -E "Duration|Throughput|Issued|Warp Cycles|Eligible" $OUT/ncu-details-$n.txt | head -12
done
el "bench fp8 v1 / this tree (the conversion's loads a row at a time)"
for k in v1 s30; do
  timeout $(lim 60) build-$k/mlaverify bench --backend cuda --batch 16 --heads 8,16 --qlen 1,16 --prefix 32768,131072 \
    --page-size 64 --kv-dtype fp8 --reps 20 --min-reps 10 --csv $OUT/fp8-$k.csv > $OUT/fp8-$k.txt 2>&1; echo "rc=$?"
done
paste -d, <(cut -d, -f3-7,9 $OUT/fp8-v1.csv) <(cut -d, -f9 $OUT/fp8-s30.csv) | tee $OUT/fp8-v1-ab.txt
el "bench page 1 / 64"
for ps in 64 1; do
  timeout $(lim 60) build-s30/mlaverify bench --backend cuda --batch 16 --heads 8,16 --qlen 1 --prefix 32768,131072 \
    --page-size $ps --reps 20 --min-reps 10 --csv $OUT/page$ps.csv > $OUT/page$ps.txt 2>&1; echo "rc=$?"
done
paste -d, <(cut -d, -f3-7,9 $OUT/page64.csv) <(cut -d, -f7,9 $OUT/page1.csv) | tee $OUT/page-ab.txt
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log timing-*-?.txt ncu-details-*.txt page*.txt fp8-*.txt 2>/dev/null | grep -v -e page-ab -e fp8-v1-ab) && (cd $OUT && rm -f *.log timing-*-?.txt page64.txt page1.txt fp8-v1.txt fp8-s30.txt)
el done
