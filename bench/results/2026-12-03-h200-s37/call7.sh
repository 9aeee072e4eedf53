#!/usr/bin/env bash
# Session 37, call 7 (main b97a14a, .debs carried): call 6 had the producer kernel 0.92-0.95x the
# seesaw kernel's time in the exact plans at B 1, q_len 1, 131k (H 8, 16, 64), where the rule
# (average KV tiles an item >= 6) picks the seesaw. The default rule against
# MLAV_SM90_KERNEL=producer over B 1 and 16, H 8-128, q_len 1, 2, 4, prefixes 4k-131k (random
# trees, page 64, `mlaverify bench` as the A/Bs), two rounds interleaved.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/src-m && mkdir /tmp/src-m && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-m
cmake -S /tmp/src-m -B build-m -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > build-m.log 2>&1 &&
  cmake --build build-m -j16 --target mlaverify_cli >> build-m.log 2>&1 || echo "build failed"
el built
for r in 1 2; do for v in def producer; do
  e=X=1; [ $v = def ] || e=MLAV_SM90_KERNEL=$v
  for B in 1 16; do
    timeout 60 env $e build-m/mlaverify bench --backend cuda --batch $B --heads 8,16,64,128 --qlen 1,2,4 \
      --prefix 4096,32768,131072 --page-size 64 --reps 15 --min-reps 5 --max-seconds 0.5 --csv $v-$B-$r.csv > /dev/null 2>&1 || echo "rc=$? $v $B $r"
  done
done; el "round $r"; done
python3 - <<'PY' | tee $OUT/producer.txt
import csv, math, os, glob
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
t = {}
for f in glob.glob('*-*-*.csv'):
    v = f.split('-')[0]
    for x in csv.DictReader(open(f)):
        k = (int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))
        t.setdefault(k, {}).setdefault(v, []).append(float(x['time_us']))
ks = sorted(k for k in t if len(t[k].get('def', [])) == 2 and len(t[k].get('producer', [])) == 2)
print('producer / default time (min of two rounds; round 1, round 2), default us')
for k in ks:
    e = t[k]
    print('B %2d H %3d q %d prefix %6d: %.3f (%.3f, %.3f)  %8.1f' % (k + (min(e['producer']) / min(e['def']), e['producer'][0] / e['def'][0], e['producer'][1] / e['def'][1], min(e['def']))))
for B in (1, 16):
    for q in (1, 2, 4):
        v = [min(t[k]['producer']) / min(t[k]['def']) for k in ks if k[0] == B and k[2] == q]
        print('B %d q %d: geomean %.3f (%.3f-%.3f)' % (B, q, g(v), min(v), max(v)))
PY
tar -czf $OUT/csv.tgz *-*-*.csv
el done
