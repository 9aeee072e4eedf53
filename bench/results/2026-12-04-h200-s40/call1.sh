#!/usr/bin/env bash
# Session 40, call 1 (from the checkout root, .debs and .peer carried): the seesaw kernel's S
# reader fences (fence.proxy.async) after each column block's wait only where its tile was
# gathered (tile_gathered: the refills' TMA rule, from the page id they took, looked up a pair
# ahead), not after a TMA tile's (session 30: those fences cost 1.1% at page 64). ptxas: no
# spills; the page-64 instances re-laid out (6,792 instructions against 6,680), the GATHER and
# FP8 instances main's instruction for instruction. r = this tree; b = main (tma-fence.patch
# reversed). r's test_sm90_gpu, seesaw ctest, racecheck, synccheck, memcheck on TMA-tile cases;
# chains at the harness's 120 shapes at page 64 on b and r, two rounds interleaved; the SASS
# of FlashMLA's prebuilt split-KV kernel and of our BF16 seesaw instance, for reading offline.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-04-h200-s40
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in r b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/$R/tma-fence.patch") || echo "reverse failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = r ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j8 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
( zcat .peer/flashmla/prebuilt/splitkv_bf16_sm90a.o.gz > /tmp/fm.o && cuobjdump -sass /tmp/fm.o | gzip > $OUT/fm-sass.txt.gz ) &
wait
el built
o=$(find build-r -name 'launch_sm90.cu.o' | head -1)
cuobjdump -sass -fun '_ZN6mlav906seesaw24flash_sm90_seesaw_kernelI13__nv_bfloat16S2_Lb0ELb0EEEv17mlav_flash_params14CUtensorMap_sti' "$o" | gzip > $OUT/ours-sass.txt.gz
ls -la $OUT
MLAV_SM90_CASES=6 timeout $(lim 90) build-r/tests/test_sm90_gpu > r-sm90.log 2>&1
echo "r test_sm90_gpu rc=$? ss ok $(grep '^  ss ' r-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' r-sm90.log); $(grep -E 'PASSED|FAILED' r-sm90.log | tr '\n' ' ')"
el sm90
bb() { timeout $(lim 90) "$@" --backend cuda --tree chain --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
for r in 1 2; do
  for v in b r; do
    for B in 1 16; do
      bb build-$v/mlaverify bench --batch $B --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072 --page-size 64 --csv pg-$v-p64-b$B-$r.csv
    done
  done
  el "round $r"
done
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os, collections
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
t = collections.defaultdict(lambda: collections.defaultdict(list))
for v in 'br':
    for B in (1, 16):
        for r in (1, 2):
            f = 'pg-%s-p64-b%d-%d.csv' % (v, B, r)
            for x in (csv.DictReader(open(f)) if os.path.exists(f) else []):
                t[(int(x['batch']), int(x['heads']), int(x['q_len']), int(x['prefix']))][v].append(float(x['time_us']))
ks = sorted(k for k in t if t[k]['b'] and t[k]['r'])
m = {k: {c: min(t[k][c]) for c in 'br'} for k in ks}
G = lambda f=lambda k: True: g([m[k]['r'] / m[k]['b'] for k in ks if f(k)])
print('%d shapes, chains, page 64 (min of two rounds)' % len(ks))
print('r / b %.4f' % G())
for B in (1, 16):
    print('B %d: r / b %.4f' % (B, G(lambda k: k[0] == B)))
T = lambda k: k[3] >= 32768 and k[1] * k[2] >= 256
print('where H x q_len >= 256 from 32k: %.4f; q_len 1 from 32k: %.4f' % (G(T), G(lambda k: k[3] >= 32768 and k[2] == 1)))
for r in (0, 1):
    v = [t[k]['r'][r] / t[k]['b'][r] for k in ks if len(t[k]['r']) > r and len(t[k]['b']) > r]
    print('round %d: r / b %.4f over %d' % (r + 1, g(v), len(v)))
print('B H q prefix | b r us | r/b')
for k in ks:
    e = m[k]
    print('%2d %3d %2d %6d | %9.2f %9.2f | %.3f' % (k + (e['b'], e['r'], e['r'] / e['b'])))
PY
el ab
mkdir -p csv && mv *.csv csv/ 2>/dev/null; tar -czf $OUT/csv.tgz csv
(cd build-r && timeout $(lim 100) ctest --timeout 90 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden|test_cuda_gpu)$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../r-ctest.log | head)
for tf in racecheck:test_sm90_tma_tiles synccheck:test_sm90_tma_tiles memcheck:test_sm90_tma_tiles racecheck:test_sm90_random; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-r/tests/test_sm90_gpu > r-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY r-$tool-$f.log | tail -1)"
done
el tested
tar -czf $OUT/logs.tgz build-*.log r-*.log
el done
