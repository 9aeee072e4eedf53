#!/usr/bin/env bash
# Session 38, call 3 (from the checkout root on branch rows-tma, .debs carried): the seesaw
# kernel reads a pool whose pages do not hold whole tiles (page_size 1 here) by TMA, a box of one
# row and one column block each (128 bytes, 128B swizzle, at the row's place in the stage), issued
# by the 64 threads that hold the tile's row ids, instead of gathering each row by cp.async.
# r = this tree; b = main bfc7cce (rows-tma.patch reversed). r's test_sm90_gpu, seesaw ctest,
# racecheck, synccheck and memcheck on the page_size 1 and 16 cases; then chains at the
# harness's 120 shapes: page 1 under the default rule and with MLAV_SM90_KERNEL=seesaw, page 64,
# on b and r, two rounds interleaved.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s38
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in r b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/rows-tma.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = r ] && { tg="mlaverify_cli test_sm90_gpu test_sm90_layouts_gpu test_golden test_cuda_gpu test_backends test_fp8"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
MLAV_SM90_CASES=6 timeout $(lim 90) build-r/tests/test_sm90_gpu > r-sm90.log 2>&1
echo "r test_sm90_gpu rc=$? ss ok $(grep '^  ss ' r-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' r-sm90.log); $(grep -E 'PASSED|FAILED|ERROR' r-sm90.log | tr '\n' ' ')"
grep -E "FAIL|ERROR|mismatch" r-sm90.log | head -5
el sm90
bb() { timeout $(lim 90) "$@" --backend cuda --tree chain --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do
  for v in b r; do
    for c in p64 p1 p1ss; do
      ps=64; [ $c != p64 ] && ps=1; k=; [ $c = p1ss ] && k=seesaw
      for B in 1 16; do
        MLAV_SM90_KERNEL=$k bb build-$v/mlaverify bench --batch $B --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --page-size $ps --csv pg-$v-$c-b$B-$r.csv
      done
    done
  done
  el "round $r"
done
python3 - <<'PY' | tee $OUT/page1.txt
import csv, math, os, collections
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
t = collections.defaultdict(lambda: collections.defaultdict(list))
for v in 'br':
    for c in ('p64', 'p1', 'p1ss'):
        for B in (1, 16):
            for r in (1, 2):
                f = 'pg-%s-%s-b%d-%d.csv' % (v, c, B, r)
                for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                    t[(int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))][v + c].append(float(x['time_us']))
cols = [v + c for v in 'br' for c in ('p64', 'p1', 'p1ss')]
ks = sorted(k for k in t if all(t[k][c] for c in cols))
m = {k: {c: min(t[k][c]) for c in cols} for k in ks}
G = lambda a, b: g([m[k][a] / m[k][b] for k in ks])
print('%d shapes (min of two rounds)' % len(ks))
print('r / b: page 64 %.4f; page 1 (rule) %.4f; page 1 (seesaw) %.4f' % (G('rp64', 'bp64'), G('rp1', 'bp1'), G('rp1ss', 'bp1ss')))
print('page 1 / page 64: b rule %.4f, b seesaw %.4f; r rule %.4f, r seesaw %.4f' % (G('bp1', 'bp64'), G('bp1ss', 'bp64'), G('rp1', 'rp64'), G('rp1ss', 'rp64')))
for r in (0, 1):
    v = [t[k]['rp1ss'][r] / t[k]['bp1ss'][r] for k in ks if len(t[k]['rp1ss']) > r and len(t[k]['bp1ss']) > r]
    w = [t[k]['rp64'][r] / t[k]['bp64'][r] for k in ks if len(t[k]['rp64']) > r and len(t[k]['bp64']) > r]
    print('round %d: r / b page 1 (seesaw) %.4f, page 64 %.4f' % (r + 1, g(v), g(w)))
print('B H q prefix | b p64 p1 p1ss | r p64 p1 p1ss us | r/b p1ss, r p1ss/p64, r p1/p64')
for k in ks:
    e = m[k]
    print('%2d %3d %2d %6d | %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f | %.3f %.3f %.3f' % (k + tuple(e[c] for c in cols) + (e['rp1ss'] / e['bp1ss'], e['rp1ss'] / e['rp64'], e['rp1'] / e['rp64'])))
PY
mkdir -p csv && mv *.csv csv/ && tar -czf $OUT/csv.tgz csv
el ab
(cd build-r && timeout $(lim 120) ctest --timeout 100 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden|test_cuda_gpu|test_sm90_layouts_gpu)$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../r-ctest.log | head)
for tf in memcheck:test_sm90_bad_page_ids racecheck:test_sm90_nonfinite_hidden_draft synccheck:test_sm90_nonfinite_hidden_draft synccheck:test_sm90_bad_page_ids; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-r/tests/test_sm90_gpu > r-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY r-$tool-$f.log | tail -1)"
done
el tested
tar -czf $OUT/logs.tgz build-*.log r-*.log
el done
