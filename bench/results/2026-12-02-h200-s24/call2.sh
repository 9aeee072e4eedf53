#!/usr/bin/env bash
# call 2: the STEP instances' variants (engine rows, BF16, production) against 3445dec; the
# Hopper helper's milestone A diagnostic
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
mkdir -p $OUT/var
B="--backend cuda --preset production --kv-dtype bf16 --engine 1.5"
el hopper-build
if [ -d .hopper ]; then
  (cmake -S .hopper -B build-hop -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_BUILD_TESTS=ON > $OUT/hopper-build.log 2>&1 &&
   cmake --build build-hop -j16 --target ${HOPPER_TARGETS:-wgmma_check} >> $OUT/hopper-build.log 2>&1) || tail -30 $OUT/hopper-build.log
fi &
hpid=$!
el base-build
cmake -S .ab-base/3445dec -B build-vbase -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_BUILD_TESTS=OFF > $OUT/var/build.log 2>&1
cmake --build build-vbase -j16 --target mlaverify_cli >> $OUT/var/build.log 2>&1 || { tail -20 $OUT/var/build.log; }
cmake -S . -B build-vnew -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_BUILD_TESTS=OFF >> $OUT/var/build.log 2>&1
wait $hpid
el hopper-run
if [ -x build-hop/bench/diag/wgmma_check ] || [ -n "${HOPPER_RUN:-}" ]; then
  (eval "${HOPPER_RUN:-build-hop/bench/diag/wgmma_check}") > $OUT/hopper-run.log 2>&1; echo "hopper rc=$?"; tail -40 $OUT/hopper-run.log
fi
el base-bench
cli=build-vbase/mlaverify; [ -x $cli ] || cli=build-vbase/src/cli/mlaverify
$cli bench $B --engine-csv $OUT/var/base.csv > build-vbase/base.txt 2>&1 || tail build-vbase/base.txt
cp src/cuda/verify_flash.cu /tmp/vf.orig; cp src/cuda/CMakeLists.txt /tmp/cm.orig
for v in ${VARIANTS:-vB vF vBL}; do
  el "variant $v"
  cp .ab-var/$v/verify_flash.cu src/cuda/verify_flash.cu
  cp /tmp/cm.orig src/cuda/CMakeLists.txt
  if [ -f .ab-var/$v/cmake.sed ]; then sed -i -f .ab-var/$v/cmake.sed src/cuda/CMakeLists.txt; fi
  cmake -S . -B build-vnew >> $OUT/var/build.log 2>&1
  cmake --build build-vnew -j16 --target mlaverify_cli >> $OUT/var/build.log 2>&1 || { tail -20 $OUT/var/build.log; continue; }
  build-vnew/mlaverify bench $B --engine-csv $OUT/var/$v.csv > build-vnew/$v.txt 2>&1 || tail build-vnew/$v.txt
  python3 .ab-var/cmp.py $OUT/var/base.csv $OUT/var/$v.csv $v >> $OUT/var/cmp.txt; grep SUMMARY $OUT/var/cmp.txt | tail -1
done
cp /tmp/vf.orig src/cuda/verify_flash.cu; cp /tmp/cm.orig src/cuda/CMakeLists.txt
el done
