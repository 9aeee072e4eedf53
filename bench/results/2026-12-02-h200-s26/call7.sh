#!/usr/bin/env bash
# call 7: the L2 prefetch only over pages of at least a tile (this tree): sm90_timing, then
# test_sm90_gpu (both families against the oracle, page_size 1 and 64)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cmake -S . -B build-d -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF > build-d.log 2>&1
cmake --build build-d -j16 --target sm90_timing test_sm90_gpu >> build-d.log 2>&1 || { grep -E "error" build-d.log | head; exit 1; }
el timing; timeout 60 build-d/tests/sm90_timing 15 > $OUT/timing.txt 2>&1; echo "rc=$?"; grep -E "geomean| 1 chain|16  128  16  131072|1  128  16  131072" $OUT/timing.txt
el sm90-tests; timeout 100 build-d/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|\[  ERROR" $OUT/test_sm90.log
el done
