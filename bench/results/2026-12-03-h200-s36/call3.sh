#!/usr/bin/env bash
# Session 36, call 3 (from the checkout's root on branch s36-ad, .debs carried): stage 0 freed in
# the middle of the pair. WG1 computes S_B, then with ref0 and P_A from WG0 (hand-over A) issues
# O_R += P_A V_A and scores B under it, and refills stage 0's blocks 4..7 once it completes;
# both warpgroups read P_A at ref0 (no rewrite at M); WG0 refills stage 0's P slot after
# hand-over AD (WG1's P_A V_A completed). ptxas 13.0 builds each BF16/F16 seesaw instance with
# 976 bytes of spill stores (main: 0). a = this checkout; b = main (a with mid-pair-refill.patch
# reversed). a's test_sm90_gpu; both timed in one process each, two rounds interleaved.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s36
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 400 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
el build
for v in a b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/mid-pair-refill.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = a ] && { tg="mlaverify_cli test_sm90_gpu"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
MLAV_SM90_CASES=6 timeout $(lim 60) build-a/tests/test_sm90_gpu > a-sm90.log 2>&1
echo "a test_sm90_gpu rc=$? ss ok $(grep '^  ss ' a-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' a-sm90.log); $(grep -E 'PASSED|FAILED' a-sm90.log | tr '\n' ' ')"
bb() { timeout $(lim 60) "$@" --backend cuda --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do for v in b a; do
  bb build-$v/mlaverify bench --batch 1 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --page-size 64 --csv b1-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768 --page-size 64 --csv b16-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,16,64,128 --qlen 1,16 --prefix 131072 --page-size 64 --csv b16l-$v-$r.csv
  bb build-$v/mlaverify bench --batch 16 --heads 8,128 --qlen 1,16 --prefix 32768 --page-size 64 --kv-dtype fp8 --csv fp8-$v-$r.csv
done; el "round $r"; done
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
allr = []
for s in ('b1', 'b16', 'b16l', 'fp8'):
    t = {}
    for v in 'ba':
        for r in (1, 2):
            f = '%s-%s-%d.csv' % (s, v, r)
            for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                k = (x['batch'], x['heads'], x['q_len'], x['prefix'], x.get('kv_dtype', ''))
                t.setdefault(k, {}).setdefault(v, []).append(float(x['time_us']))
    rat = {k: min(e['a']) / min(e['b']) for k, e in t.items() if 'a' in e and 'b' in e}
    allr += list(rat.values())
    print('%s: %d points, a/b (min of rounds) geomean %.4f, range %.3f-%.3f' % (
        s, len(rat), g(list(rat.values())), min(rat.values() or [0]), max(rat.values() or [0])))
    for k in sorted(rat, key=lambda k: rat[k])[:3] + sorted(rat, key=lambda k: rat[k])[-3:]:
        print('   B %s H %s q %s prefix %s %s: b %.2f a %.2f us, %.3f' % (k + (min(t[k]['b']), min(t[k]['a']), rat[k])))
print('ALL %d points geomean %.4f' % (len(allr), g(allr)))
PY
mkdir -p csv && mv *.csv csv/ && tar -czf $OUT/csv.tgz csv
tar -czf $OUT/logs.tgz build-*.log a-*.log
el done
