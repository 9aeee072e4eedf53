#!/usr/bin/env bash
# Session 36, call 1 (from the checkout's root, .debs carried): the legal family's hidden tiles.
# g = this checkout (each thread's two rows of the draft mask prefetched toward the L1 at the
# legal kernel's block start, as the sm_90a kernels do since session 35); b = main (g with
# legal-prefetch.patch reversed). g's legal-family GPU tests; both timed with
# MLAV_FLASH_FAMILY=legal in one process each, two rounds interleaved; then Nsight Compute on
# g's seesaw kernel at B 16, H 16, q_len 16, 32768 (FlashMLA's second largest lead in s34).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s36
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
el build
for v in g b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/legal-prefetch.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = g ] && { tg="mlaverify_cli test_golden test_cuda_gpu test_backends test_fp8 test_steps_gpu test_shard_gpu test_page_rows_gpu test_tree"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
(cd build-g && timeout $(lim 150) ctest --timeout 100 -R "^(test_golden_legal|test_cuda_gpu_legal|test_backends_legal|test_fp8_legal|test_steps_gpu_legal|test_shard_gpu_legal|test_page_rows_gpu_legal|test_tree|test_cuda_gpu|test_golden)$" > ../g-ctest.log 2>&1
 echo "g ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../g-ctest.log | head)
el tested
P=4080,4144,4208,4272,4336,4400,4464,4528,4592,4656
bb() { MLAV_FLASH_FAMILY=legal timeout $(lim 70) "$@" --backend cuda --page-size 64 --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do for v in b g; do
  bb build-$v/mlaverify bench --batch 1 --heads 64,128 --qlen 16 --prefix $P --csv sweep-$v-$r.csv
  bb build-$v/mlaverify bench --batch 1 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --csv b1-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768 --csv b16-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,128 --qlen 1,16 --prefix 32768 --kv-dtype fp8 --csv fp8-$v-$r.csv
done; el "round $r"; done
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
for s in ('sweep', 'b1', 'b16', 'fp8'):
    t = {}
    for v in 'bg':
        for r in (1, 2):
            f = '%s-%s-%d.csv' % (s, v, r)
            for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                k = (x['batch'], x['heads'], x['q_len'], x['prefix'], x.get('kv_dtype', ''))
                t.setdefault(k, {}).setdefault(v, []).append(float(x['time_us']))
    rat = {k: min(e['g']) / min(e['b']) for k, e in t.items() if 'g' in e and 'b' in e}
    rr = [[e[v][i] for v in 'gb'] for e in t.values() if len(e.get('g', [])) == 2 and len(e.get('b', [])) == 2 for i in (0, 1)]
    r1 = g([a / b for a, b in rr[0::2]]) if rr else float('nan'); r2 = g([a / b for a, b in rr[1::2]]) if rr else float('nan')
    print('%s: %d points, g/b (min of rounds) geomean %.4f, range %.3f-%.3f; round 1 %.4f, round 2 %.4f' % (
        s, len(rat), g(list(rat.values())), min(rat.values() or [0]), max(rat.values() or [0]), r1, r2))
    for k in sorted(rat, key=lambda k: rat[k])[:4] + sorted(rat, key=lambda k: rat[k])[-3:]:
        print('   B %s H %s q %s prefix %s %s: b %.2f g %.2f us, %.3f' % (k + (min(t[k]['b']), min(t[k]['g']), rat[k])))
    if s == 'sweep':
        for k in sorted(t, key=lambda k: (int(k[1]), int(k[3]))):
            print('   H %s prefix %s: b %s g %s' % (k[1], k[3], t[k].get('b'), t[k].get('g')))
PY
el ab
mkdir -p csv && mv *.csv csv/ && tar -czf $OUT/csv.tgz csv
pt="--batch 16 --heads 16 --qlen 16 --prefix 32768 --page-size 64"
timeout $(lim 120) ncu --clock-control none --section SpeedOfLight --section SourceCounters \
  --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis_Tables --import-source no \
  -k regex:seesaw --launch-skip 2 -c 1 -f -o /tmp/q1 build-g/mlaverify bench $pt --reps 6 --min-reps 6 --backend cuda > ncu-run.log 2>&1
echo "ncu rc=$?"
ncu -i /tmp/q1.ncu-rep --page details > $OUT/ncu-details.txt 2>&1
ncu -i /tmp/q1.ncu-rep --page source --csv --print-source sass > ncu-src.csv 2>&1 && gzip -c ncu-src.csv > $OUT/ncu-src.csv.gz
grep -E "Duration|Warp Cycles Per Issued" $OUT/ncu-details.txt | head -3
el ncu
tar -czf $OUT/logs.tgz build-*.log g-*.log ncu-run.log
el done
