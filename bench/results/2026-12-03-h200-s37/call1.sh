#!/usr/bin/env bash
# Session 37, call 1 (prepared in session 36; from the checkout root, main + wg0-register-a.patch,
# .debs and .peer carried): WG0 of the seesaw kernel multiplies its own P_A from registers too
# (register-A wgmma, as WG1's P_B since a789f3a) and stores P_A once, at the pair's reference M,
# for WG1 alone: no store at ref0, no warpgroup barrier before its P_A V_A (unless V_A was
# sanitized) and none before the rewrite. ptxas: 24-28 bytes of spill stores a BF16/F16 seesaw
# instance (main: 0), 20-32 an FP8 one (main: 8-16). r = this checkout; b = main (r with
# wg0-register-a.patch reversed). r's test_sm90_gpu; both timed in one process each, two rounds
# interleaved; r's seesaw-family tests, racecheck and synccheck; FlashMLA beside r if its
# geomean over all points is below 0.99 (COMMIT: the device's HEAD; set it by hand where that is not the branch's commit).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s37
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
el build
for v in r b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/wg0-register-a.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = r ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
MLAV_SM90_CASES=6 timeout $(lim 60) build-r/tests/test_sm90_gpu > r-sm90.log 2>&1
echo "r test_sm90_gpu rc=$? ss ok $(grep '^  ss ' r-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' r-sm90.log); $(grep -E 'PASSED|FAILED' r-sm90.log | tr '\n' ' ')"
bb() { timeout $(lim 60) "$@" --backend cuda --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do for v in b r; do
  bb build-$v/mlaverify bench --batch 1 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --page-size 64 --csv b1-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768 --page-size 64 --csv b16-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,16 --prefix 131072 --page-size 64 --csv b16l-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,128 --qlen 16 --prefix 32768 --page-size 1 --csv page1-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,128 --qlen 1,16 --prefix 32768 --page-size 64 --kv-dtype fp8 --csv fp8-$v-$r.csv
done; el "round $r"; done
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
allr = []
for s in ('b1', 'b16', 'b16l', 'page1', 'fp8'):
    t = {}
    for v in 'br':
        for r in (1, 2):
            f = '%s-%s-%d.csv' % (s, v, r)
            for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                k = (x['batch'], x['heads'], x['q_len'], x['prefix'], x.get('kv_dtype', ''))
                t.setdefault(k, {}).setdefault(v, []).append(float(x['time_us']))
    rat = {k: min(e['r']) / min(e['b']) for k, e in t.items() if 'r' in e and 'b' in e}
    allr += list(rat.values())
    rr = [[e[v][i] for v in 'rb'] for e in t.values() if len(e.get('r', [])) == 2 and len(e.get('b', [])) == 2 for i in (0, 1)]
    r1 = g([a / b for a, b in rr[0::2]]) if rr else float('nan'); r2 = g([a / b for a, b in rr[1::2]]) if rr else float('nan')
    print('%s: %d points, r/b (min of rounds) geomean %.4f, range %.3f-%.3f; round 1 %.4f, round 2 %.4f' % (
        s, len(rat), g(list(rat.values())), min(rat.values() or [0]), max(rat.values() or [0]), r1, r2))
    for k in sorted(rat, key=lambda k: rat[k])[:4] + sorted(rat, key=lambda k: rat[k])[-3:]:
        print('   B %s H %s q %s prefix %s %s: b %.2f r %.2f us, %.3f' % (k + (min(t[k]['b']), min(t[k]['r']), rat[k])))
print('ALL %d points geomean %.4f' % (len(allr), g(allr)))
PY
mkdir -p csv && mv *.csv csv/ && tar -czf $OUT/csv.tgz csv
el ab
(cd build-r && timeout $(lim 90) ctest --timeout 80 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden|test_cuda_gpu)$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../r-ctest.log | head)
for tf in racecheck:test_sm90_nonfinite_hidden_draft racecheck:test_sm90_tma_tiles synccheck:test_sm90_tma_tiles; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-r/tests/test_sm90_gpu > r-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY r-$tool-$f.log | tail -1)"
done
el tested
if awk '/^ALL/ {exit !($5 < 0.99)}' $OUT/ab.txt; then
  el "FlashMLA beside r"
  rm -rf /tmp/peer && mkdir -p /tmp/peer
  COMMIT=$(git rev-parse --short HEAD)+wg0rs FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=$(lim 230) BENCH_ARGS="--variants=tree,page1,fp8" \
    OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
  tail -3 /tmp/peer/summary.txt 2>/dev/null
  tar -czf $OUT/flashmla.tgz -C /tmp peer
fi
tar -czf $OUT/logs.tgz build-*.log r-*.log
el done
