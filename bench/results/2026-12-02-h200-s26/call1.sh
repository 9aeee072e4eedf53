#!/usr/bin/env bash
# call 1: the alternate consume's first run (branch s25-sm90v2 merged with main): its layout
# check, sm90_timing's five variants, test_sm90_gpu (legal / sm90 / sm90alt against the oracle),
# and the merged tree's engine steps (the one schedule rule's device twin against the host)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cmake -S . -B build-d -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF > build-d.log 2>&1
cmake --build build-d -j16 --target test_sm90_layouts_gpu sm90_timing test_sm90_gpu test_steps_gpu mlaverify_cli >> build-d.log 2>&1 || { grep -E "error" build-d.log | head -30; exit 1; }
el layouts
timeout 60 build-d/tests/test_sm90_layouts_gpu > $OUT/layouts.log 2>&1; echo "layouts rc=$?"; tail -15 $OUT/layouts.log
el timing
timeout 200 build-d/tests/sm90_timing 20 > $OUT/timing.txt 2>&1; echo "timing rc=$?"; tail -70 $OUT/timing.txt
el sm90-tests
timeout 240 build-d/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90 rc=$?"; grep -E "PASSED|FAILED|FAIL|seed|\[  ERROR" $OUT/test_sm90.log | head -30
el steps
MLAV_TEST_STEPS=12 timeout 100 build-d/tests/test_steps_gpu > $OUT/steps.log 2>&1; echo "steps rc=$?"; grep -E "PASSED|FAILED|\[  ERROR" $OUT/steps.log | head
el done
