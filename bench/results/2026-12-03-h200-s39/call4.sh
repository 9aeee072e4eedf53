#!/usr/bin/env bash
# Session 39, call 4 (from the checkout root on branch rowsrc, .debs carried): the seesaw
# kernel's GATHER instances (a 16-bit cache without the map of tiles: page_size 1) with each
# row's source looked up a pair ahead: the lane that loads a row's page id also makes its
# address (kv_row_src) under the pair's products, and a refill takes it by two shuffles, so the
# refill's rows carry no dependent integer chain (call 3 / s38 call 5: page 1 ran ~510 more
# instructions a trip than page 64, mostly that chain). ptxas: no spills, 250 registers, the
# GATHER instance 6,160 instructions against main's 7,176; every other instance's SASS is main's.
# r = this tree; b = main 9c8385f (row-srcs.patch reversed). r's test_sm90_gpu, seesaw ctest,
# racecheck, synccheck, memcheck on page 1 and 16 cases; chains at the harness's 120 shapes at
# page 64 and page 1 (the rule's kernel) on b and r, two rounds interleaved; the production
# preset (page_size 1) through the engine path on b and r.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s39
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in r b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/row-srcs.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = r ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
MLAV_SM90_CASES=6 timeout $(lim 90) build-r/tests/test_sm90_gpu > r-sm90.log 2>&1
echo "r test_sm90_gpu rc=$? ss ok $(grep '^  ss ' r-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' r-sm90.log); $(grep -E 'PASSED|FAILED' r-sm90.log | tr '\n' ' ')"
el sm90
bb() { timeout $(lim 90) "$@" --backend cuda --tree chain --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do
  for v in b r; do
    for ps in 64 1; do
      for B in 1 16; do
        bb build-$v/mlaverify bench --batch $B --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --page-size $ps --csv pg-$v-p$ps-b$B-$r.csv
      done
    done
  done
  el "round $r"
done
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os, collections
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
t = collections.defaultdict(lambda: collections.defaultdict(list))
for v in 'br':
    for ps in (64, 1):
        for B in (1, 16):
            for r in (1, 2):
                f = 'pg-%s-p%d-b%d-%d.csv' % (v, ps, B, r)
                for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                    t[(int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))]['%s%d' % (v, ps)].append(float(x['time_us']))
cols = ['b64', 'b1', 'r64', 'r1']
ks = sorted(k for k in t if all(t[k][c] for c in cols))
m = {k: {c: min(t[k][c]) for c in cols} for k in ks}
G = lambda a, b, f=lambda k: True: g([m[k][a] / m[k][b] for k in ks if f(k)])
print('%d shapes, chains (min of two rounds)' % len(ks))
print('r / b: page 64 %.4f; page 1 %.4f' % (G('r64', 'b64'), G('r1', 'b1')))
print('page 1 / page 64: b %.4f, r %.4f' % (G('b1', 'b64'), G('r1', 'r64')))
T = lambda k: k[3] >= 32768 and k[1] * k[2] >= 256
print('where H x q_len >= 256 from 32k: r / b page 1 %.4f; page 1 / page 64 b %.4f r %.4f' % (G('r1', 'b1', T), G('b1', 'b64', T), G('r1', 'r64', T)))
for B in (1, 16):
    print('B %d: r / b page 64 %.4f, page 1 %.4f' % (B, G('r64', 'b64', lambda k: k[0] == B), G('r1', 'b1', lambda k: k[0] == B)))
for r in (0, 1):
    for ps in (64, 1):
        v = [t[k]['r%d' % ps][r] / t[k]['b%d' % ps][r] for k in ks if len(t[k]['r%d' % ps]) > r and len(t[k]['b%d' % ps]) > r]
        print('round %d: r / b page %d %.4f over %d' % (r + 1, ps, g(v), len(v)))
print('B H q prefix | b p64 p1 | r p64 p1 us | r/b p64, r/b p1, r p1/p64')
for k in ks:
    e = m[k]
    print('%2d %3d %2d %6d | %9.2f %9.2f | %9.2f %9.2f | %.3f %.3f %.3f' % (k + (e['b64'], e['b1'], e['r64'], e['r1'], e['r64'] / e['b64'], e['r1'] / e['b1'], e['r1'] / e['r64'])))
PY
el ab
for v in b r; do
  timeout $(lim 40) build-$v/mlaverify bench --backend cuda --preset production --engine 1.0 --engine-csv eng-$v.csv > eng-$v.log 2>&1 || echo "engine $v rc=$?"
done
python3 - <<'PY' | tee $OUT/engine.txt
import csv, math
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
d = {}
for v in 'br':
    try:
        for x in csv.DictReader(open('eng-%s.csv' % v)):
            d.setdefault(tuple(x[k] for k in x if k in ('batch', 'heads', 'q_len', 'prefix', 'kv_dtype', 'page_size')), {})[v] = x
    except OSError as e:
        print(e)
print('columns:', list(next(iter(d.values()))['b'].keys()) if d else None)
ks = [k for k in d if len(d[k]) == 2]
for col in ('exact_us', 'run_us', 'time_us', 'step_us'):
    try:
        print('%s r / b %.4f over %d' % (col, g([float(d[k]['r'][col]) / float(d[k]['b'][col]) for k in ks]), len(ks)))
    except (KeyError, ValueError):
        pass
for v in 'br':
    try:
        print('%s run / exact %.4f' % (v, g([float(d[k][v]['run_us']) / float(d[k][v]['exact_us']) for k in ks])))
    except (KeyError, ValueError):
        pass
PY
mkdir -p csv && mv *.csv csv/ 2>/dev/null; tar -czf $OUT/csv.tgz csv
(cd build-r && timeout $(lim 100) ctest --timeout 90 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden|test_cuda_gpu)$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../r-ctest.log | head)
for tf in racecheck:test_sm90_random racecheck:test_sm90_nonfinite_hidden_draft synccheck:test_sm90_bad_page_ids synccheck:test_sm90_random memcheck:test_sm90_bad_page_ids; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-r/tests/test_sm90_gpu > r-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY r-$tool-$f.log | tail -1)"
done
el tested
tar -czf $OUT/logs.tgz build-*.log r-*.log eng-*.log
el done
