#!/usr/bin/env bash
# Session 50's second call, on the warm machine after call.sh (reuses build-s50): the harness's
# second round (fp8, fp8keys), Nsight Compute on the keys kernel at B 16, q_len 1, 131k, H 8
# and 16 (session 43's sections), synccheck and initcheck on the keys kernel's cases.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o2; mkdir -p $O
trap 'tar -czf $OUT/o2.tgz -C /tmp o2' EXIT
B=$PWD/build-s50
[ -f $B/libmlaverify.so ] || { echo "no build-s50: run call.sh first"; exit 1; }
for h in 8 16; do
  MLAV_SM90_KERNEL=keys timeout $(lim 70) ncu --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section WarpStateStats -k regex:keys -c 1 \
    $B/mlaverify bench --backend cuda --batch 16 --heads $h --qlen 1 --prefix 131072 --kv-dtype fp8 \
    --reps 3 > $O/ncu-h$h.txt 2>&1
  echo "ncu h$h rc=$?"; grep -E "Duration|DRAM Throughput|L1/TEX Cache|Compute \(SM\)|Registers" $O/ncu-h$h.txt
done
el ncu
grep -q fp8keys .peer/flashmla/bench_flashmla.py || (cd .peer/flashmla && patch -p1 -s < ../../bench/plans/s49/harness-fp8keys.patch)
MLAVERIFY_LIBRARY=$B/libmlaverify.so PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1 \
  MLAV_COMMIT=${COMMIT:-head} timeout $(lim 140) python3 .peer/flashmla/bench_flashmla.py --out $O/r2 \
  --libs mlaverify --variants=fp8,fp8keys --batch 1,16 --heads 8,16 --qlen 1,2 \
  --prefix 4096,32768,131072 --copy-gib 0.25 --mm-n 1024 --ref-requests first,last --budget 115 \
  --rep-ms 60 > $O/r2.log 2>&1
echo "harness rc=$?"; tail -1 $O/r2.log | cut -c1-200; grep -E "geomean" $O/r2/variants.md
el harness
for tool in synccheck initcheck; do
  timeout $(lim 50) env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=1 \
    compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu > $O/san-$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|FAIL|PASSED" $O/san-$tool.log | head -3
done
el done
