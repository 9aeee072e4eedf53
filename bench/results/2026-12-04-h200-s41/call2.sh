#!/usr/bin/env bash
# Session 41 call 2, from the checkout root (.debs and .peer carried):
# 1. the A/B of sums-late.patch (the row sums of P after P V's issue, in key order: the same
#    values) on main: r = main + the patch, b = main. r's test_sm90_gpu and seesaw ctest; chains at
#    the harness's 120 shapes, page 64 four rounds, page 1 and FP8 two, the order of b and r
#    alternating by round.
# 2. Nsight Compute (--set full, clocks left alone) of FlashMLA's split-KV kernel and our seesaw
#    kernel on the same data (the peer harness's process, one shape each run): B 16, H 64,
#    q_len 2, 131k (FlashMLA 0.87x our time in session 40's harness) and B 16, H 128, q_len 16,
#    131k (0.95x).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-04-h200-s41
A=bench/diag/ab_table.py
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
PATCH=${PATCH:-$R/sums-late.patch}
for v in r b; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = r ] && { (cd /tmp/src-r && git apply "$OLDPWD/$PATCH") || echo "apply failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = r ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_cuda_gpu test_backends test_fp8"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j6 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
MAX_JOBS=4 PHASE=build OUT=/tmp/peer COMMIT=$(git rev-parse --short HEAD) FLASHMLA_PREBUILT_SPLITKV=1 \
  bash .peer/flashmla/run.sh . > peer-build.log 2>&1 &
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
el tested
tail -3 peer-build.log
for shape in "16 64 2" "16 128 16"; do
  set -- $shape
  for k in flash_fwd_splitkv_mla_kernel seesaw; do
    n=ncu-b$1-h$2-q$3-$k
    PYTHONDONTWRITEBYTECODE=1 MLAVERIFY_LIBRARY=/tmp/mlav-build/libmlaverify.so PYTHONPATH=$PWD/python \
      timeout $(lim 100) ncu --clock-control none -k regex:$k --launch-count 1 --set full -o $OUT/$n -f \
      python3 .peer/flashmla/bench_flashmla.py --out /tmp/ncu-$n --batch $1 --heads $2 --qlen $3 \
      --prefix 131072 --flashmla-build /tmp/flashmla-build --libs flashmla,mlaverify --variants= \
      --ref-requests none --warmup-ms 5 --rep-ms 5 > $n.log 2>&1
    echo "$n rc=$?"
    [ -f $OUT/$n.ncu-rep ] && ncu --import $OUT/$n.ncu-rep --page details > $OUT/$n.txt 2>&1
    [ -f $OUT/$n.ncu-rep ] && ncu --import $OUT/$n.ncu-rep --page raw --csv > $OUT/$n.csv 2>&1
    el "$n"
  done
done
tar -czf $OUT/logs.tgz build-*.log r-*.log peer-build.log ncu-*.log
el done
