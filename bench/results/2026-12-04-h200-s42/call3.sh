#!/usr/bin/env bash
# Session 42 call 3, from the checkout root (.debs carried), the working tree = main eec3d2f +
# compact-mask.patch (mask_scores' per-key test replaced by a row's visibility as 64 bits and a
# bit test a score: the seesaw instances' code 104 -> 85.5 KB, GATHER 130 -> 112 KB; ptxas no
# spills). Trees: b = main (the patch reversed); k = the working tree; kc = k + clean-all.patch
# (the clean loop in every 16-bit instance: dropped in calls 1-2 at 144 KB of code, now ~125);
# x = k + mutant-mask.patch and y = k + mutant-clean.patch (test_sm90_gpu must fail). k's tests:
# test_sm90_gpu, the sm90/seesaw ctest (steps_gpu too), racecheck/synccheck; the A/B of b, k, kc:
# page 64 and page 1 three rounds, FP8 two (b, k), trees (q_len 4-16) two (b, k, kc).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-04-h200-s42
A=$PWD/bench/diag/ab_table.py
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in b k kc x y; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  case $v in
    b) (cd /tmp/src-b && git apply -R "$OLDPWD/$R/compact-mask.patch") || echo "apply b failed" ;;
    kc) (cd /tmp/src-kc && git apply "$OLDPWD/$R/clean-all.patch") || echo "apply kc failed" ;;
    x) (cd /tmp/src-x && git apply "$OLDPWD/$R/mutant-mask.patch") || echo "apply x failed" ;;
    y) (cd /tmp/src-y && git apply "$OLDPWD/$R/mutant-clean.patch") || echo "apply y failed" ;;
  esac
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF; j=3
  [ $v = k ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8 test_steps_gpu test_kernel_rules test_sm90_layouts_gpu"; tests=-DMLAV_BUILD_TESTS=ON; j=4; }
  case $v in x|y) tg=test_sm90_gpu; tests=-DMLAV_BUILD_TESTS=ON; j=2 ;; esac
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j$j --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
for v in k x y; do
  MLAV_SM90_CASES=6 timeout $(lim 90) build-$v/tests/test_sm90_gpu > $v-sm90.log 2>&1
  echo "$v test_sm90_gpu rc=$? ss ok $(grep '^  ss ' $v-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' $v-sm90.log); $(grep -E 'PASSED|FAILED' $v-sm90.log | tr '\n' ' ')"
done
el sm90
bb() { timeout $(lim 90) "$@" --backend cuda --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
grid="--heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072"
orders=("b k kc" "kc b k" "k kc b")
for r in 1 2 3; do
  for v in ${orders[$((r - 1))]}; do
    for B in 1 16; do
      bb build-$v/mlaverify bench --tree chain --batch $B $grid --page-size 64 --csv pg-$v-p64-b$B-$r.csv
      bb build-$v/mlaverify bench --tree chain --batch $B $grid --page-size 1 --csv pg-$v-p1-b$B-$r.csv
      if [ $r -le 2 ]; then
        bb build-$v/mlaverify bench --tree tree --batch $B --heads 8,16,64,128 --qlen 4,9,16 --prefix 4096,32768,131072 --page-size 64 --csv pg-$v-tree-b$B-$r.csv
        case $v in b|k) bb build-$v/mlaverify bench --tree chain --batch $B $grid --page-size 64 --kv-dtype fp8 --csv pg-$v-fp8-b$B-$r.csv ;; esac
      fi
    done
  done
  el "round $r"
done
mkdir -p csv && mv *.csv csv/ 2>/dev/null; tar -czf $OUT/csv.tgz csv
for v in k kc; do
  rm -rf tab-$v && mkdir tab-$v && (cd tab-$v
    for f in ../csv/pg-b-*.csv; do ln -s $f .; done
    for f in ../csv/pg-$v-*.csv; do n=$(basename $f); ln -s $f pg-r-${n#pg-$v-}; done
    echo "######## r = $v"; python3 $A p64 p1 tree fp8) > $OUT/ab-$v.txt 2>&1
  grep -E "^#|^==|^   (B |H|round)" $OUT/ab-$v.txt
done
el ab
(cd build-k && timeout $(lim 200) ctest --timeout 100 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden_sm90|test_backends_sm90|test_cuda_gpu_sm90|test_fp8_sm90|test_golden|test_cuda_gpu|test_kernel_rules|test_sm90_layouts_gpu)$" > ../k-ctest.log 2>&1
 echo "k ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../k-ctest.log | head -20)
el ctest
for tf in racecheck:test_sm90_random synccheck:test_sm90_random; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-k/tests/test_sm90_gpu > k-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY k-$tool-$f.log | tail -1)"
done
el sanitized
(cd build-k && timeout $(lim 250) ctest --timeout 240 -R "^test_steps_gpu_seesaw$" > ../k-steps.log 2>&1; echo "k steps_seesaw rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../k-steps.log | head -5)
el done
tar -czf $OUT/logs.tgz build-*.log k-*.log x-*.log y-*.log
