#!/usr/bin/env bash
# Session 41 call 5, from the checkout root (.debs and .peer carried): the landed tree's GPU tests
# in the Hopper family's variants, one at a time (ctest in parallel on one GPU ran past its time
# box in session 40): test_sm90_gpu, then ctest test_golden, test_fp8, test_backends,
# test_steps_gpu and test_cuda_gpu with the sm_90a family forced (_sm90) and with its seesaw
# kernel forced (_seesaw), test_steps_gpu and test_sm90_layouts_gpu, test_kernel_rules. With
# what time is left: Nsight Compute's warp states and source counters of FlashMLA's kernel and
# ours at B 16, H 64, q_len 2, 131k (FlashMLA 0.87x our time in session 40's harness).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 575 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=ON"
rm -rf /tmp/src-r && mkdir /tmp/src-r && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-r
( MAX_JOBS=4 PHASE=build OUT=/tmp/peer COMMIT=$(git rev-parse --short HEAD) FLASHMLA_PREBUILT_SPLITKV=1 \
  bash .peer/flashmla/run.sh /tmp/src-r > peer-build.log 2>&1 ) &
cmake -S /tmp/src-r -B build-r $cfg > build-r.log 2>&1 && cmake --build build-r -j12 --target mlaverify_cli test_sm90_gpu test_sm90_layouts_gpu test_golden test_cuda_gpu test_backends test_fp8 test_steps_gpu test_kernel_rules >> build-r.log 2>&1 || echo "build-r failed"
el built
MLAV_SM90_CASES=6 timeout $(lim 90) build-r/tests/test_sm90_gpu > r-sm90.log 2>&1
echo "r test_sm90_gpu rc=$? ss ok $(grep '^  ss ' r-sm90.log | grep -c ': ok') of $(grep -c '^  ss ' r-sm90.log); $(grep -E 'PASSED|FAILED' r-sm90.log | tr '\n' ' ')"
el sm90
for t in test_golden_sm90 test_golden_seesaw test_steps_gpu test_steps_gpu_sm90 test_steps_gpu_seesaw \
         test_fp8_sm90 test_fp8_seesaw test_backends_sm90 test_backends_seesaw test_cuda_gpu_sm90 \
         test_cuda_gpu_seesaw test_sm90_layouts_gpu test_kernel_rules; do
  l=$(lim 200); [ $l -gt 20 ] || { echo "$t: no time left"; continue; }
  (cd build-r && timeout $((l + 5)) ctest --timeout $l -R "^$t$" > ../ct-$t.log 2>&1)
  echo "$t: $(grep -E 'Test +#' ct-$t.log | sed 's/  */ /g' | cut -c1-90)"
done
el ctest
wait
tail -2 peer-build.log
mkdir -p $OUT/ncu
for k in flash_fwd_splitkv_mla_kernel seesaw; do
  l=$(lim 60); [ $l -gt 30 ] || { echo "ncu $k: no time left"; continue; }
  n=ncu-b16-h64-q2-$k
  PYTHONDONTWRITEBYTECODE=1 MLAVERIFY_LIBRARY=/tmp/mlav-build/libmlaverify.so PYTHONPATH=/tmp/src-r/python \
    timeout $l ncu --clock-control none -k regex:$k --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis -o $n -f \
    python3 .peer/flashmla/bench_flashmla.py --out /tmp/ncu-$n --batch 16 --heads 64 --qlen 2 \
    --prefix 131072 --flashmla-build /tmp/flashmla-build --libs flashmla,mlaverify --variants= \
    --ref-requests none --warmup-ms 5 --rep-ms 5 > $n.log 2>&1
  echo "$n rc=$?"
  [ -f $n.ncu-rep ] && ncu --import $n.ncu-rep --page raw --csv > $OUT/ncu/$n.csv 2>&1
  [ -f $n.ncu-rep ] && ncu --import $n.ncu-rep --page source --csv --print-source sass > $OUT/ncu/$n-src.csv 2>&1
  el "$n"
done
tar -czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
tar -czf $OUT/logs.tgz build-r.log r-*.log ct-*.log peer-build.log ncu-*.log 2>/dev/null
el done
