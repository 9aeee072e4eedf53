#!/usr/bin/env bash
# Session 42 call 1, from the checkout root (.debs carried): session 41's two prepared layout
# patches for the seesaw loop's instruction-fetch stalls, A/B against main in one call, four
# trees: b = main; s = b + seldom.patch (__builtin_expect on the seldom branches); c = b +
# clean-loop.patch (the pairs whose tiles hide no key in a loop of their own, 16-bit instances);
# m = b + both. Chains at the harness's 120 shapes, the minimum of the rounds a point: page 64
# three rounds, page 1 two, FP8 two (b and s: clean-loop leaves the FP8 instances' loop alone),
# the order of the trees rotating by round. Also main's GPU test of the plan-time scale rule
# (d785aab): test_cuda_scale_signs with the seesaw kernel forced, and test_kernel_rules.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-04-h200-s42
A=$PWD/bench/diag/ab_table.py
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 575 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in b s c m; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  case $v in
    s) (cd /tmp/src-s && git apply "$OLDPWD/$R/seldom.patch") || echo "apply s failed" ;;
    c) (cd /tmp/src-c && git apply "$OLDPWD/$R/clean-loop.patch") || echo "apply c failed" ;;
    m) (cd /tmp/src-m && git apply "$OLDPWD/$R/seldom.patch" && git apply "$OLDPWD/$R/clean-loop.patch") || echo "apply m failed" ;;
  esac
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = b ] && { tg="mlaverify_cli test_cuda_gpu test_kernel_rules"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j4 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
timeout $(lim 30) build-b/tests/test_kernel_rules > b-rules.log 2>&1; echo "b test_kernel_rules rc=$? $(grep -E 'PASSED|FAILED' b-rules.log | tr '\n' ' ')"
MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw MLAV_TEST_FILTER=test_cuda_scale_signs timeout $(lim 60) \
  build-b/tests/test_cuda_gpu > b-scale.log 2>&1; echo "b test_cuda_scale_signs (seesaw forced) rc=$? $(grep -E 'PASSED|FAILED|OK|seed' b-scale.log | tr '\n' ' ' | cut -c1-300)"
el tested
bb() { timeout $(lim 90) "$@" --backend cuda --tree chain --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
grid="--heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072"
orders=("b s c m" "m c s b" "s m b c")
for r in 1 2 3; do
  for v in ${orders[$((r - 1))]}; do
    for B in 1 16; do
      bb build-$v/mlaverify bench --batch $B $grid --page-size 64 --csv pg-$v-p64-b$B-$r.csv
    done
  done
  el "p64 round $r"
done
for r in 1 2; do
  for v in ${orders[$((r - 1))]}; do
    for B in 1 16; do
      bb build-$v/mlaverify bench --batch $B $grid --page-size 1 --csv pg-$v-p1-b$B-$r.csv
      case $v in b|s) bb build-$v/mlaverify bench --batch $B $grid --page-size 64 --kv-dtype fp8 --csv pg-$v-fp8-b$B-$r.csv ;; esac
    done
  done
  el "p1/fp8 round $r"
done
mkdir -p csv && mv *.csv csv/ 2>/dev/null; tar -czf $OUT/csv.tgz csv
for v in s c m; do
  rm -rf tab-$v && mkdir tab-$v && (cd tab-$v
    for f in ../csv/pg-b-*.csv; do ln -s $f .; done
    for f in ../csv/pg-$v-*.csv; do n=$(basename $f); ln -s $f pg-r-${n#pg-$v-}; done
    echo "######## r = $v"; python3 $A p64 p1 fp8) > $OUT/ab-$v.txt 2>&1
  grep -E "^#|^==|^   (B |H|round)" $OUT/ab-$v.txt
done
tar -czf $OUT/logs.tgz build-*.log b-*.log
el done
