#!/usr/bin/env bash
# call 6: test_merge_gpu under memcheck with its whole output (call 5: 6 failed, 55 errors), the
# Python GPU tests of the merge and torch ops, and the family rule's build
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_BUILD_BENCH=OFF > build-f.log 2>&1
cmake --build build-f -j16 --target mlaverify test_merge_gpu mlaverify_cli >> build-f.log 2>&1 || { tail -30 build-f.log; exit 1; }
build-f/mlaverify info | grep flash
timeout 60 compute-sanitizer --tool memcheck build-f/tests/test_merge_gpu > $OUT/merge-memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "FAILED|ERROR SUMMARY|Invalid|Program hit|at 0x|by thread" $OUT/merge-memcheck.log | sort | uniq -c | sort -rn | head -20
MLAVERIFY_LIBRARY=$PWD/build-f/libmlaverify.so PYTHONPATH=$PWD/python timeout 100 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_merge.py python/tests/test_torch.py python/tests/test_validation.py > $OUT/python.log 2>&1; echo "pytest rc=$?"; tail -6 $OUT/python.log
