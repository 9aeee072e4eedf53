#!/usr/bin/env bash
# call 4: the engine-step GPU tests of 6d7bfa7 (cuda, both families, and cuda-naive's new plans for
# limits), golden on both families, then the A/B of the unsharded path against 92fc5ec (the tree
# before the shard merge), production preset, the default family rule
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $(( ${BUDGET:-255} - ($(date +%s) - t0) )); }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
( for side in base new; do src=$PWD dir=build-ab-new; [ $side = base ] && src=$PWD/.ab-base/92fc5ec dir=build-ab-base-92fc5ec
    cmake -S "$src" -B "$dir" -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_BUILD_TESTS=OFF > /dev/null 2>&1
    cmake --build "$dir" -j 6 --target mlaverify_cli > /dev/null 2>&1 || echo "ab build $side failed"; done ) &
abpid=$!
cmake -S . -B build-f -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real > build-f.log 2>&1
cmake --build build-f -j 10 --target test_steps_gpu mlaverify_cli >> build-f.log 2>&1 || { grep error build-f.log | head; }
el steps
for fam in sm90 legal; do
  ( env MLAV_FLASH_FAMILY=$fam MLAV_TEST_STEPS=12 timeout 110 build-f/tests/test_steps_gpu > $OUT/steps-$fam.log 2>&1; echo "steps $fam rc=$?" >> $OUT/steps-$fam.log ) &
done
for fam in sm90 legal; do echo "== golden cuda $fam"; env MLAV_FLASH_FAMILY=$fam timeout 60 build-f/mlaverify check --backend cuda golden 2>&1 | tail -1; done
echo "== golden cuda-naive"; timeout 60 build-f/mlaverify check --backend cuda-naive golden 2>&1 | tail -1
wait %2 %3 2>/dev/null; wait $(jobs -p | grep -v "^$abpid$") 2>/dev/null
for fam in sm90 legal; do grep -E "^\[  (PASSED|FAILED)|FAILED  \]|rc=|SKIPPED  \]" $OUT/steps-$fam.log | tail -4; done
wait $abpid
el "ab (left $(left)s)"
OUT=$OUT/ab timeout $(( $(left) - 8 )) bash bench/ab.sh .ab-base/92fc5ec --preset production > /dev/null 2>&1; echo "ab rc=$?"
tail -50 $OUT/ab/ab.txt 2>/dev/null | awk 'NR<=3 || /^ / {print}' | head -60
el done
