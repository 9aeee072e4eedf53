#!/usr/bin/env bash
# Session 38, call 1 (from the checkout root on branch wg0-early-s, .debs carried): the seesaw
# kernel's warpgroups issue the next pair's S over their own refill's four blocks behind their
# last P V of a pair (16-bit caches). r2 = this tree (both warpgroups); r1 = WG0 only
# (early-s-wg1.patch reversed); b = main bfc7cce (both patches reversed). r1's and r2's
# test_sm90_gpu; the three timed in one process each, two rounds interleaved (b, r1, r2); r1's
# and r2's seesaw-family ctest, racecheck and synccheck.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s38
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
el build
for v in r2 r1 b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v != r2 ] && { (cd /tmp/src-$v && git apply -R "$OLDPWD/$R/early-s-wg1.patch") || echo "reverse wg1 failed ($v)"; }
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/early-s-wg0.patch") || echo "reverse wg0 failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v != b ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j6 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
for v in r1 r2; do
  MLAV_SM90_CASES=6 timeout $(lim 60) build-$v/tests/test_sm90_gpu > $v-sm90.log 2>&1
  echo "$v test_sm90_gpu rc=$? ss ok $(grep '^  ss ' $v-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' $v-sm90.log); $(grep -E 'PASSED|FAILED' $v-sm90.log | tr '\n' ' ')"
done
el sm90
bb() { timeout $(lim 60) "$@" --backend cuda --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do for v in b r1 r2; do
  bb build-$v/mlaverify bench --batch 1 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --page-size 64 --csv b1-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768 --page-size 64 --csv b16-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,16 --prefix 131072 --page-size 64 --csv b16l-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,128 --qlen 16 --prefix 32768 --page-size 1 --csv page1-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,128 --qlen 1,16 --prefix 32768 --page-size 64 --kv-dtype fp8 --csv fp8-$v-$r.csv
done; el "round $r"; done
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
for new in ('r1', 'r2'):
    allr = []
    print('== %s / b' % new)
    for s in ('b1', 'b16', 'b16l', 'page1', 'fp8'):
        t = {}
        for v in ('b', new):
            for r in (1, 2):
                f = '%s-%s-%d.csv' % (s, v, r)
                for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                    k = (x['batch'], x['heads'], x['q_len'], x['prefix'], x.get('kv_dtype', ''))
                    t.setdefault(k, {}).setdefault(v, []).append(float(x['time_us']))
        rat = {k: min(e[new]) / min(e['b']) for k, e in t.items() if new in e and 'b' in e}
        allr += list(rat.values())
        rr = [[e[v][i] for v in (new, 'b')] for e in t.values() if len(e.get(new, [])) == 2 and len(e.get('b', [])) == 2 for i in (0, 1)]
        r1 = g([a / b for a, b in rr[0::2]]) if rr else float('nan'); r2 = g([a / b for a, b in rr[1::2]]) if rr else float('nan')
        print('%s: %d points, %s/b (min of rounds) geomean %.4f, range %.3f-%.3f; round 1 %.4f, round 2 %.4f' % (
            s, len(rat), new, g(list(rat.values())), min(rat.values() or [0]), max(rat.values() or [0]), r1, r2))
        for k in sorted(rat, key=lambda k: rat[k])[:3] + sorted(rat, key=lambda k: rat[k])[-3:]:
            print('   B %s H %s q %s prefix %s %s: b %.2f %s %.2f us, %.3f' % (k + (min(t[k]['b']), new, min(t[k][new]), rat[k])))
    print('ALL %s: %d points geomean %.4f' % (new, len(allr), g(allr)))
PY
mkdir -p csv && mv *.csv csv/ && tar -czf $OUT/csv.tgz csv
el ab
for v in r1 r2; do
  (cd build-$v && timeout $(lim 90) ctest --timeout 80 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden|test_cuda_gpu)$" > ../$v-ctest.log 2>&1
   echo "$v ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../$v-ctest.log | head)
  for tf in racecheck:test_sm90_nonfinite_hidden_draft racecheck:test_sm90_tma_tiles synccheck:test_sm90_tma_tiles; do
    tool=${tf%%:*}; f=${tf#*:}
    MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
      build-$v/tests/test_sm90_gpu > $v-$tool-$f.log 2>&1; echo "$v $tool $f rc=$? $(grep SUMMARY $v-$tool-$f.log | tail -1)"
  done
done
el tested
tar -czf $OUT/logs.tgz build-*.log r1-*.log r2-*.log
el done
