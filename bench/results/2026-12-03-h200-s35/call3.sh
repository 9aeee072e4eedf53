#!/usr/bin/env bash
# Session 35, call 3 (from the checkout's root, .debs carried): the hidden tile made cheap.
# g = this checkout (the mask words loaded a word at a time and prefetched at the block's start,
# V sanitized over the tile's draft rows only); b = main (g with hidden-tiles.patch reversed).
# g's GPU tests first, then both timed in one process each, two rounds interleaved.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s35
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 270 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
el build
for v in g b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/hidden-tiles.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = g ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_fp8 test_tree test_backends"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
MLAV_SM90_CASES=6 timeout $(lim 120) build-g/tests/test_sm90_gpu > g-sm90.log 2>&1
echo "g test_sm90_gpu rc=$? ss ok $(grep '^  ss ' g-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' g-sm90.log); $(grep -E 'PASSED|FAILED' g-sm90.log | tr '\n' ' ')"
(cd build-g && timeout $(lim 150) ctest --timeout 100 -R "^(test_golden|test_golden_legal|test_golden_sm90|test_golden_seesaw|test_cuda_gpu|test_cuda_gpu_sm90|test_cuda_gpu_seesaw|test_fp8_sm90|test_fp8_seesaw|test_backends_seesaw|test_tree)$" > ../g-ctest.log 2>&1
 echo "g ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../g-ctest.log | head)
el tested
P=4080,4144,4208,4272,4336,4400,4464,4528,4592,4656
bb() { timeout $(lim 60) "$@" --backend cuda --page-size 64 --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do for v in b g; do
  bb build-$v/mlaverify bench --batch 1 --heads 64,128 --qlen 16 --prefix $P --csv sweep-$v-$r.csv
  bb build-$v/mlaverify bench --batch 1 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --csv b1-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768 --csv b16-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,128 --qlen 1,16 --prefix 32768 --kv-dtype fp8 --csv fp8-$v-$r.csv
done; el "round $r"
  [ $r = 1 ] && { MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_nonfinite_hidden_draft' timeout $(lim 90) compute-sanitizer --tool racecheck --error-exitcode 99 \
  build-g/tests/test_sm90_gpu > g-racecheck.log 2>&1; echo "racecheck rc=$? $(grep SUMMARY g-racecheck.log | tail -1)"; }
done
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
tar -czf $OUT/logs.tgz build-*.log g-*.log
el done
