#!/usr/bin/env bash
# Session 42 call 2, from the checkout root (.debs carried). Call 1: clean-loop.patch took page 1
# 0.978x and page 64 1.025x (4096: 1.044, up to 1.16 at B 1, H 16, q_len 9, 32k: +6 us in every
# round). Trees: b = main; g = b + clean-g.patch (the clean loop in the GATHER instances only,
# page 1's); h = b + clean-h.patch (in every 16-bit instance, but only for a block of >= 32
# clean tiles); c = b + clean-loop.patch (Nsight Compute only). The A/B of b, g, h: page 64 and
# page 1 three rounds each, the order rotating. g's tests: test_sm90_gpu, the seesaw ctest,
# racecheck and synccheck. Nsight Compute's warp states and source counters of b and c at
# B 1, H 16, q_len 9, 32k, page 64 (where c lost 6 us).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-04-h200-s42
A=$PWD/bench/diag/ab_table.py
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 575 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in b g h c; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  case $v in
    g) (cd /tmp/src-g && git apply "$OLDPWD/$R/clean-g.patch") || echo "apply g failed" ;;
    h) (cd /tmp/src-h && git apply "$OLDPWD/$R/clean-h.patch") || echo "apply h failed" ;;
    c) (cd /tmp/src-c && git apply "$OLDPWD/$R/clean-loop.patch") || echo "apply c failed" ;;
  esac
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = g ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j4 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
MLAV_SM90_CASES=6 timeout $(lim 90) build-g/tests/test_sm90_gpu > g-sm90.log 2>&1
echo "g test_sm90_gpu rc=$? ss ok $(grep '^  ss ' g-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' g-sm90.log); $(grep -E 'PASSED|FAILED' g-sm90.log | tr '\n' ' ')"
el sm90
bb() { timeout $(lim 90) "$@" --backend cuda --tree chain --reps 15 --min-reps 5 --max-seconds 0.5 > /dev/null 2>&1 || echo "rc=$? $*"; }
grid="--heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072"
orders=("b g h" "h b g" "g h b")
for r in 1 2 3; do
  for v in ${orders[$((r - 1))]}; do
    for B in 1 16; do
      bb build-$v/mlaverify bench --batch $B $grid --page-size 64 --csv pg-$v-p64-b$B-$r.csv
      bb build-$v/mlaverify bench --batch $B $grid --page-size 1 --csv pg-$v-p1-b$B-$r.csv
    done
  done
  el "round $r"
done
mkdir -p csv && mv *.csv csv/ 2>/dev/null; tar -czf $OUT/csv.tgz csv
for v in g h; do
  rm -rf tab-$v && mkdir tab-$v && (cd tab-$v
    for f in ../csv/pg-b-*.csv; do ln -s $f .; done
    for f in ../csv/pg-$v-*.csv; do n=$(basename $f); ln -s $f pg-r-${n#pg-$v-}; done
    echo "######## r = $v"; python3 $A p64 p1) > $OUT/ab-$v.txt 2>&1
  grep -E "^#|^==|^   (B |H|round)" $OUT/ab-$v.txt
done
el ab
(cd build-g && timeout $(lim 150) ctest --timeout 90 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw|test_golden_sm90|test_backends_sm90)$" > ../g-ctest.log 2>&1
 echo "g ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../g-ctest.log | head)
for tf in racecheck:test_sm90_random synccheck:test_sm90_random; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-g/tests/test_sm90_gpu > g-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY g-$tool-$f.log | tail -1)"
done
el tested
mkdir -p $OUT/ncu
for v in b c; do
  timeout $(lim 90) ncu --clock-control none -k regex:seesaw --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section LaunchStats -o ncu-$v -f \
    build-$v/mlaverify bench --batch 1 --heads 16 --qlen 9 --prefix 32768 --page-size 64 \
    --backend cuda --tree chain --reps 3 --min-reps 1 --max-seconds 0.2 > ncu-$v.log 2>&1
  echo "ncu $v rc=$?"
  ncu --import ncu-$v.ncu-rep --page raw --csv > $OUT/ncu/ncu-$v.csv 2>&1
  ncu --import ncu-$v.ncu-rep --page source --csv --print-source sass > $OUT/ncu/ncu-$v-src.csv 2>&1
  ncu --import ncu-$v.ncu-rep --page details > $OUT/ncu/ncu-$v-details.txt 2>&1
done
tar -czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
el ncu
tar -czf $OUT/logs.tgz build-*.log g-*.log ncu-*.log
el done
