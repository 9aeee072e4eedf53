#!/usr/bin/env bash
# Prepared in session 41, not run: the A/B of one patch on main, r = main + $PATCH, b = main
# (default clean-loop.patch; PATCH=bench/results/2026-12-04-h200-s41/seldom.patch for the other).
# Both answer call 2's profile, which put 6.7% of our warps' stall samples on instruction fetch
# (FlashMLA 1.0%), most at the first instruction past a branch over cold code laid out in line
# (after each S, the mask's 878 instructions; in a refill, the gather under the TMA branch):
# - clean-loop.patch: the 16-bit instances run the pairs whose tiles hide no key in a loop of
#   their own, without the mask and V's sanitizing, then the rest in today's loop (the FP8
#   instances keep one loop: split, two spilled 24-28 bytes more). Code: one more loop.
# - seldom.patch: __builtin_expect on the seldom branches (a tile with hidden keys, V's
#   sanitizing, a gathered tile under the tensor map, rows whose reference moved): the PTX of the
#   BF16 page-64 instance goes from S's wait to the row maxima in 80 lines instead of ~1,350,
#   the cold code out of line. Code: the same size.
# ptxas (nvcc 13.0, sm_90a), both: no spills in the 16-bit instances, the FP8 ones as main.
# Predicted: no_instructions under half its share, 1-2% where tensor-bound, nothing at short
# prefixes. r's test_sm90_gpu (trees and draft masks), seesaw ctest, racecheck and synccheck; the
# A/B at the harness's 120 shapes, the order alternating by round; Nsight Compute's warp states
# of b and r at B 16, H 128, q_len 16, 131k. From the checkout root, .debs carried.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-04-h200-s41
A=bench/results/2026-12-04-h200-s40/ab_table.py
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
PATCH=${PATCH:-$R/clean-loop.patch}
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
  order="b r"; [ $((r % 2)) = 0 ] && order="r b"
  for v in $order; do
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
(cd build-r && timeout $(lim 100) ctest --timeout 90 -R "^(test_golden_seesaw|test_cuda_gpu_seesaw|test_backends_seesaw|test_fp8_seesaw)$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed" ../r-ctest.log | head)
for tf in racecheck:test_sm90_random synccheck:test_sm90_random racecheck:test_sm90_tma_tiles synccheck:test_sm90_tma_tiles; do
  tool=${tf%%:*}; f=${tf#*:}
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$f timeout $(lim 60) compute-sanitizer --tool $tool --error-exitcode 99 \
    build-r/tests/test_sm90_gpu > r-$tool-$f.log 2>&1; echo "$tool $f rc=$? $(grep SUMMARY r-$tool-$f.log | tail -1)"
done
el tested
mkdir -p $OUT/ncu
for v in b r; do
  timeout $(lim 90) ncu --clock-control none -k regex:seesaw --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o ncu-$v -f \
    build-$v/mlaverify bench --batch 16 --heads 128 --qlen 16 --prefix 131072 --page-size 64 \
    --backend cuda --tree chain --reps 3 --min-reps 1 --max-seconds 0.2 > ncu-$v.log 2>&1
  echo "ncu $v rc=$?"
  ncu --import ncu-$v.ncu-rep --page raw --csv > $OUT/ncu/ncu-$v.csv 2>&1
  ncu --import ncu-$v.ncu-rep --page source --csv --print-source sass > $OUT/ncu/ncu-$v-src.csv 2>&1
done
tar -czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
el ncu
tar -czf $OUT/logs.tgz build-*.log r-*.log ncu-*.log
el done
