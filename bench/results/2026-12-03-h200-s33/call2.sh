#!/usr/bin/env bash
# session 33, call 2, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-03-h200-s33/call2.sh
# The tree t: the seesaw kernel's two once-an-item exchanges (BF16 q's power of two over an FP8
# cache, the epilogue's row sums) through mbarriers instead of block barriers, after call 1's
# racecheck_epochs run (racecheck pairs block barriers by each thread's count of barriers passed).
# Base: ac99055 (HEAD of the device copy). racecheck, synccheck and memcheck on t's random and
# TMA cases; test_sm90_gpu and the layouts test; sm90_timing 15 of base and t, two rounds; t2 (t
# with the sm_90a schedule's block cost 320 keys instead of 128) beside t at the three harness
# shapes whose schedule it changes and two it does not; the GPU ctest subset with what is left.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 575 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/base /tmp/t2 && mkdir -p /tmp/base /tmp/t2 && git archive ac99055 | tar -x -C /tmp/base
cp -r $(git ls-files | cut -d/ -f1 | sort -u) /tmp/t2/ 2>/dev/null
sed -i 's|    sp.min_chunk = MLAV_FLASH_SM90_TILE_N;|    sp.min_chunk = MLAV_FLASH_SM90_TILE_N;\n    sp.block_cost_keys = 320;|' /tmp/t2/src/cuda/sm90/flash_sm90.h
grep -c "block_cost_keys = 320" /tmp/t2/src/cuda/sm90/flash_sm90.h
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j5 --target sm90_timing >> base.log 2>&1; } &
{ cmake -S /tmp/t2 -B build-t2 $cfg > t2.log 2>&1 && cmake --build build-t2 -j5 --target mlaverify_cli >> t2.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j6 --target test_sm90_gpu sm90_timing test_sm90_layouts_gpu mlaverify_cli >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
grep -E "spill" build-t.log | sort | uniq -c | head -4
el built
for tool in racecheck synccheck memcheck; do
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_*random' timeout $(lim 60) compute-sanitizer --tool $tool \
    --error-exitcode 99 build-t/tests/test_sm90_gpu > $tool.log 2>&1
  echo "$tool random rc=$? ss runs: $(grep -c '^  ss ' $tool.log) ok: $(grep '^  ss ' $tool.log | grep -c ': ok') $(grep -E 'SUMMARY' $tool.log | tail -1)"
  grep -E "Race reported|Barrier error" $tool.log | sed 's/(const mlav_flash_params.*)+/(...)+/; s/(mlav_flash_params, CUtensorMap_st, int)//' | sort | uniq -c | head -6
done
MLAV_SM90_CASES=2 MLAV_TEST_FILTER='test_sm90_tma_tiles' timeout $(lim 60) compute-sanitizer --tool racecheck \
  --error-exitcode 99 build-t/tests/test_sm90_gpu > racecheck-tma.log 2>&1
echo "racecheck tma_tiles rc=$? $(grep -E 'SUMMARY' racecheck-tma.log | tail -1)"
el tests
timeout $(lim 40) build-t/tests/test_sm90_layouts_gpu > layouts.log 2>&1; echo "layouts rc=$? $(grep -c PASS layouts.log) PASS $(grep -c FAIL layouts.log) FAIL"
MLAV_SM90_CASES=6 timeout $(lim 120) build-t/tests/test_sm90_gpu > test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' test_sm90.log) ok: $(grep '^  ss ' test_sm90.log | grep -c ': ok') $(grep -E 'PASSED|FAILED' test_sm90.log | tail -2 | tr '\n' ' ')"
for r in 1 2; do for k in base t; do
  el timing $k $r
  timeout $(lim 30) build-$k/tests/sm90_timing 15 > $OUT/timing-$k-$r.txt 2>&1; echo "rc=$? $(tail -1 $OUT/timing-$k-$r.txt)"
done; done
python3 - $OUT <<'PY' | tee $OUT/timing-ab.txt
import sys, math, os
def rows(f):
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            try: r[' '.join(a[0].split())] = float(a[1].split()[3])
            except Exception: pass
    return r
d = sys.argv[1]
for r in (1, 2):
    b, n = rows("%s/timing-base-%d.txt" % (d, r)), rows("%s/timing-t-%d.txt" % (d, r))
    ks = [k for k in n if k in b]
    print("round %d: sm90/64 column (us): base (ac99055), this tree" % r)
    for k in ks:
        print("%-28s base %8.1f new %8.1f  new/base %.3f" % (k, b[k], n[k], n[k] / b[k]))
    g = [math.log(n[k] / b[k]) for k in ks]
    if g: print("round %d geomean new/base over %d points: %.3f" % (r, len(g), math.exp(sum(g) / len(g))))
PY
for k in t t2 t t2; do
  el "bench $k"
  for spec in "16 128 9 4096" "1 64 9 131072" "1 128 4 131072" "16 16 9 4096" "1 128 16 131072"; do
    set -- $spec
    timeout $(lim 30) build-$k/mlaverify bench --backend cuda --batch $1 --heads $2 --qlen $3 --prefix $4 \
      --page-size 64 --reps 30 --min-reps 10 --csv /tmp/b.csv > /dev/null 2>&1
    echo "$k $spec: $(tail -1 /tmp/b.csv)" | tee -a $OUT/blockcost.txt
  done
done
el ctest
cmake --build build-t -j16 --target mlaverify test_cuda_gpu test_golden test_backends test_steps_gpu test_fp8 \
  test_kernel_rules >> build-t.log 2>&1 || { echo "build-t (tests) failed"; grep -m12 -E "error|Error" build-t.log; }
cd build-t
MLAV_TEST_STEPS=12 timeout $(lim 300) ctest --output-on-failure --timeout 200 \
  -R "^(test_cuda_gpu|test_golden|test_steps_gpu|test_sm90_gpu|test_sm90_layouts_gpu|test_kernel_rules|test_backends_|test_fp8)" > ../ctest.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|FAILED|Failed|\*\*\*" ../ctest.log | tail -12
cd ..
tar -czf $OUT/logs.tgz *.log
el done
