#!/usr/bin/env bash
# Session 38, call 2 (from the checkout root on branch wg0-early-s, .debs carried; b = main
# bfc7cce, the tree with both early-s patches reversed): where page_size 1 costs time and which
# kernel takes it best. (a) chains at the FlashMLA harness's 120 shapes at page 64 (the rule's
# kernel), page 1 (the rule's kernel) and page 1 with MLAV_SM90_KERNEL=producer, two rounds
# interleaved; (b) Nsight Compute of the seesaw kernel at B 1, H 128, q_len 16, 32k, page 64 and
# page 1 (issue, warp states, memory); (c) the production preset's engine path at --engine 1.0
# and 1.5, two rounds.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s38
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF"
rm -rf /tmp/src-b && mkdir /tmp/src-b && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-b
(cd /tmp/src-b && git apply -R "$OLDPWD/$R/early-s-wg1.patch" && git apply -R "$OLDPWD/$R/early-s-wg0.patch") || echo "reverse failed"
cmake -S /tmp/src-b -B build-b $cfg > build-b.log 2>&1 && cmake --build build-b -j16 --target mlaverify_cli >> build-b.log 2>&1 || echo "build-b failed"
el built
M=build-b/mlaverify
bb() { timeout $(lim 90) "$@" --backend cuda --tree chain --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do
  for c in p64 p1 p1prod; do
    ps=64; [ $c != p64 ] && ps=1; k=; [ $c = p1prod ] && k=producer
    for B in 1 16; do
      MLAV_SM90_KERNEL=$k bb $M bench --batch $B --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --page-size $ps --csv pg-$c-b$B-$r.csv
    done
  done
  el "page round $r"
done
python3 - <<'PY' | tee $OUT/page1.txt
import csv, math, os, collections
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
t = collections.defaultdict(lambda: collections.defaultdict(list))
for c in ('p64', 'p1', 'p1prod'):
    for B in (1, 16):
        for r in (1, 2):
            f = 'pg-%s-b%d-%d.csv' % (c, B, r)
            for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                t[(int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))][c].append(float(x['time_us']))
ks = sorted(k for k in t if all(t[k][c] for c in ('p64', 'p1', 'p1prod')))
m = {k: {c: min(t[k][c]) for c in t[k]} for k in ks}
best = {k: min(m[k]['p1'], m[k]['p1prod']) for k in ks}
print('%d shapes; page 1 / page 64 (rule): %.4f; producer page 1 / page 64: %.4f; best of the two at page 1 / page 64: %.4f; producer / rule at page 1: %.4f' % (
    len(ks), g([m[k]['p1'] / m[k]['p64'] for k in ks]), g([m[k]['p1prod'] / m[k]['p64'] for k in ks]),
    g([best[k] / m[k]['p64'] for k in ks]), g([m[k]['p1prod'] / m[k]['p1'] for k in ks])))
for r in (0, 1):
    v = [t[k]['p1prod'][r] / t[k]['p1'][r] for k in ks if len(t[k]['p1']) > r and len(t[k]['p1prod']) > r]
    print('round %d producer / rule at page 1: %.4f over %d' % (r + 1, g(v), len(v)))
print('B H q prefix | p64 p1 p1prod us | p1/p64 prod/p64 prod/p1 | H*q')
for k in ks:
    e = m[k]
    print('%2d %3d %2d %6d | %9.2f %9.2f %9.2f | %.3f %.3f %.3f | %d' % (k + (e['p64'], e['p1'], e['p1prod'], e['p1'] / e['p64'], e['p1prod'] / e['p64'], e['p1prod'] / e['p1'], k[1] * k[2])))
PY
el page1
for ps in 64 1; do
  timeout $(lim 100) ncu --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section InstructionStats -k regex:"flash_sm90" --launch-skip 3 -c 1 -f -o /tmp/n$ps \
    $M bench --batch 1 --heads 128 --qlen 16 --prefix 32768 --page-size $ps --tree chain --reps 6 --min-reps 6 --backend cuda > ncu-$ps.log 2>&1
  echo "ncu page $ps rc=$?"
  ncu -i /tmp/n$ps.ncu-rep --page details > $OUT/ncu-p$ps.txt 2>&1
  ncu -i /tmp/n$ps.ncu-rep --page raw --csv 2>/dev/null | gzip > ncu-raw-p$ps.csv.gz
done
el ncu
for r in 1 2; do for e in 1.0 1.5; do
  timeout $(lim 60) $M bench --backend cuda --preset production --engine $e --engine-csv engine-$e-$r.csv > engine-$e-$r.log 2>&1 || echo "engine $e $r rc=$?"
done; el "engine round $r"; done
python3 - <<'PY' | tee $OUT/engine.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
key = ('batch', 'heads', 'q_len', 'prefix', 'page_size', 'dtype')
def load(f):
    return {tuple(x[k] for k in key): x for x in csv.DictReader(open(f))} if os.path.exists(f) else {}
for e in ('1.0', '1.5'):
    d = {r: load('engine-%s-%d.csv' % (e, r)) for r in (1, 2)}
    ks = [k for k in d[1] if k in d[2]]
    v = {k: min(float(d[r][k]['run_us']) for r in (1, 2)) / min(float(d[r][k]['exact_us']) for r in (1, 2)) for k in ks}
    if v:
        print('--engine %s: run / exact geomean %.4f (%.3f-%.3f), within 3%% at %d of %d' % (e, g(list(v.values())), min(v.values()), max(v.values()), sum(u <= 1.03 for u in v.values()), len(v)))
        for k in sorted(v, key=lambda k: -v[k])[:8]:
            print('  %-30s %.3f (exact %.2f us)' % (' '.join(k), v[k], min(float(d[r][k]['exact_us']) for r in (1, 2))))
PY
mkdir -p csv && mv *.csv csv/ && mv ncu-raw-*.csv.gz csv/ 2>/dev/null; tar -czf $OUT/csv.tgz csv
tar -czf $OUT/logs.tgz build-b.log ncu-*.log engine-*.log
el done
