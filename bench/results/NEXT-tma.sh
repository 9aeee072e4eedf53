#!/usr/bin/env bash
# Next session (H200): the sm_90a producer's TMA tiles (issue 39; branch s26-tma). One tree,
# two builds: build-tma1 (MLAV90_TMA=1, the branch's default) and build-tma0 (MLAV90_TMA=0: the
# path compiled out, every tile by cp.async as on the base). Three calls, each under 10 minutes
# (the builds persist on a warm machine; a later call rebuilds nothing):
#   bash bench/results/NEXT-tma.sh tests   the builds; test_sm90_layouts_gpu (TMA tile == the
#                                          cp.async tile byte for byte, and the rule's refusals),
#                                          test_sm90_gpu (both families against the oracle, the
#                                          new test_sm90_tma_tiles included), golden on cuda with
#                                          the sm90 family, and the host cost of the tensor map's
#                                          encode
#   bash bench/results/NEXT-tma.sh sanitize compute-sanitizer racecheck, synccheck and memcheck
#                                          of test_sm90_gpu's TMA cases (test_sm90_tma_tiles, the
#                                          first 4 of each group: pages of 64, both schedules,
#                                          both shapes; the bad page ids; the FP8 cache)
#   bash bench/results/NEXT-tma.sh ab      sm90_timing of tma1, tma0, tma1 again, and the ratios
#                                          (the sm90/64 column: splits aligned to 64 keys, where
#                                          every whole tile of a page-64 pool is a TMA tile)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
mode=${1:-tests}
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { # build dir, MLAV90_TMA, targets...
  local d=$1 v=$2; shift 2
  { cmake -S . -B $d $cfg -DCMAKE_CUDA_FLAGS="-DMLAV90_TMA=$v" > $d.log 2>&1 &&
    cmake --build $d -j8 --target "$@" >> $d.log 2>&1; } || { echo "$d failed"; grep -m5 error $d.log; }
}
el "build ($mode)"
b build-tma1 1 sm90_timing test_sm90_gpu test_sm90_layouts_gpu mlaverify_cli &
b build-tma0 0 sm90_timing test_sm90_layouts_gpu &
wait

if [ "$mode" = tests ]; then
  el layouts
  for v in 1 0; do
    timeout 60 build-tma$v/tests/test_sm90_layouts_gpu > $OUT/layouts-tma$v.txt 2>&1; echo "layouts tma$v rc=$?"
    grep -E "^tma |FAIL|^PASS" $OUT/layouts-tma$v.txt | tail -9
  done
  el test_sm90_gpu
  timeout 200 build-tma1/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
  grep -E "seed|PASSED|FAILED|\[  ERROR|FAIL" $OUT/test_sm90.log | head -20
  el golden
  MLAV_FLASH_FAMILY=sm90 timeout 120 build-tma1/mlaverify check --backend cuda golden > $OUT/golden.log 2>&1; echo "golden rc=$?"; tail -3 $OUT/golden.log
  el "encode cost"
  cat > build-tma1/enc.cu <<'CU'
/* the host cost of the KV pool's tensor map (kv_tensor_map.h), as mlav_flash_sm90_launch pays
 * it per launch: the entry point's first resolution, then 100000 encodes */
#include <chrono>
#include <stdio.h>
#include "kv_tensor_map.h"
int main()
{
    using clk = std::chrono::steady_clock;
    void *kv = nullptr;
    if (cudaMalloc(&kv, (size_t)4096 * 64 * 1152) != cudaSuccess)
        return 1;
    mlav90::kv_map_encoder fn = nullptr;
    auto a = clk::now();
    const cudaError_t e = mlav90::kv_map_encoder_get(&fn);
    auto z = clk::now();
    printf("entry point: %s, first %.2f us\n", cudaGetErrorString(e),
           std::chrono::duration<double, std::micro>(z - a).count());
    if (e != cudaSuccess)
        return 1;
    a = clk::now();
    for (int i = 0; i < 1000; i++)
        mlav90::kv_map_encoder_get(&fn);
    z = clk::now();
    printf("entry point, cached: %.3f us\n",
           std::chrono::duration<double, std::micro>(z - a).count() / 1000);
    CUtensorMap m;
    const int n = 100000;
    a = clk::now();
    for (int i = 0; i < n; i++)
        if (mlav90::kv_map_encode(fn, &m, kv, (uint64_t)4096 * 64 - (i & 63)) != CUDA_SUCCESS)
            return 2;
    z = clk::now();
    printf("encode: %.3f us each (%d)\n", std::chrono::duration<double, std::micro>(z - a).count() / n, n);
    return 0;
}
CU
  nvcc -O2 -std=c++17 -arch=sm_90a -Isrc/cuda/sm90 -Isrc/cuda -Iinclude build-tma1/enc.cu -o build-tma1/enc \
    && build-tma1/enc | tee $OUT/encode.txt
fi

if [ "$mode" = sanitize ]; then
  for tool in racecheck synccheck memcheck; do
    el $tool
    MLAV_SM90_CASES=4 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout 170 compute-sanitizer --tool $tool --error-exitcode 99 \
      build-tma1/tests/test_sm90_gpu > $OUT/$tool.log 2>&1; echo "$tool rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.log | tail -3
  done
fi

if [ "$mode" = ab ]; then
  for v in tma1 tma0 tma1b; do
    d=build-${v%b}; el "timing $v"
    timeout 100 $d/tests/sm90_timing 15 > $OUT/timing-$v.txt 2>&1; echo "rc=$?"; tail -1 $OUT/timing-$v.txt
  done
  python3 - $OUT <<'PY'
import sys, math
def rows(f):
    r = {}
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            v = a[1].split(); r[' '.join(a[0].split())] = (float(v[1]), float(v[3]))  # sm90_us, sm90/64
    return r
d = sys.argv[1]
A, B, C = (rows(d + '/timing-%s.txt' % v) for v in ('tma1', 'tma0', 'tma1b'))
for col, name in ((0, 'legal schedule'), (1, 'splits aligned to 64')):
    l = []; lc = []
    print("sm90 kernel, %s: time with TMA / without" % name)
    print("%-26s %9s %9s %9s %8s %8s" % ("point", "tma1", "tma0", "tma1b", "1/0", "1b/0"))
    for k in A:
        r = A[k][col] / B[k][col]; rc = C[k][col] / B[k][col]
        l.append(math.log(r)); lc.append(math.log(rc))
        print("%-26s %9.1f %9.1f %9.1f %8.3f %8.3f" % (k, A[k][col], B[k][col], C[k][col], r, rc))
    print("geomean tma1/tma0 time (%s): %.3f (first), %.3f (again)" %
          (name, math.exp(sum(l) / len(l)), math.exp(sum(lc) / len(lc))))
PY
fi
el done
