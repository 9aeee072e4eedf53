#!/usr/bin/env bash
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_BUILD_BENCH=OFF > build-f.log 2>&1
cmake --build build-f -j16 --target test_merge_gpu >> build-f.log 2>&1 || { tail -30 build-f.log; exit 1; }
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build-f/tests/test_merge_gpu > $OUT/merge-memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "PASSED|FAILED|ERROR SUMMARY|Invalid" $OUT/merge-memcheck.log | sort | uniq -c | head
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 99 build-f/tests/test_merge_gpu 2>&1 | grep -E "PASSED|FAILED|RACECHECK SUMMARY" | tail -3
