#!/usr/bin/env bash
# Session 41 call 1: the A/B of stsm-p.patch (prepared in session 40, d86cbef) on main c2b996c.
# The seesaw kernel stores each tile's P with four stmatrix.m8n8.x4 a warp (store_p_stsm,
# stages.cuh) instead of 16 generic 32-bit stores a thread and their 64-bit address arithmetic:
# WG0's store of P_A sits between its softmax and its P_A V_A, as the FMUL that session 40's
# one FFMA a score removed did (0.991x). ptxas (nvcc 13.0, sm_90a): no spills, each 16-bit
# seesaw instance 120 instructions shorter, the producer kernel's SASS unchanged. Predicted
# 0.5-1% where tensor-bound, if test_sm90_gpu holds (the swizzled rows of each 8x8 matrix are
# the point to check). r = main + the patch; b = main. r's test_sm90_gpu, seesaw ctest,
# racecheck and synccheck; chains at the harness's 120 shapes, page 64 four rounds, page 1 and
# FP8 two, b and r interleaved. From the checkout root, .debs carried.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-04-h200-s41
A=bench/diag/ab_table.py
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
PATCH=${PATCH:-$R/stsm-p.patch}
for v in r b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = r ] && { (cd /tmp/src-r && git apply "$OLDPWD/$PATCH") || echo "apply failed"; }
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
grid="--heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072"
for r in 1 2 3 4; do
  for v in b r; do
    for B in 1 16; do
      bb build-$v/mlaverify bench --batch $B $grid --page-size 64 --csv pg-$v-p64-b$B-$r.csv
      if [ $r -le 2 ]; then
        bb build-$v/mlaverify bench --batch $B $grid --page-size 1 --csv pg-$v-p1-b$B-$r.csv
        bb build-$v/mlaverify bench --batch $B $grid --page-size 64 --kv-dtype fp8 --csv pg-$v-fp8-b$B-$r.csv
      fi
    done
  done
  el "round $r"
done
python3 $A p64 p1 fp8 > $OUT/ab.txt; grep -E "^==|^   (B|H|round)" $OUT/ab.txt
el ab
mkdir -p csv && mv *.csv csv/ 2>/dev/null; tar -czf $OUT/csv.tgz csv
(cd build-r && timeout $(lim 100) ctest --timeout 90 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden|test_cuda_gpu)$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../r-ctest.log | head)
for tf in racecheck:test_sm90_random synccheck:test_sm90_random racecheck:test_sm90_fp8_random synccheck:test_sm90_tma_tiles; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-r/tests/test_sm90_gpu > r-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY r-$tool-$f.log | tail -1)"
done
el tested
tar -czf $OUT/logs.tgz build-*.log r-*.log
el done
