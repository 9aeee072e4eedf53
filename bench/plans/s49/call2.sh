#!/usr/bin/env bash
# Session 49 call 2 (HEAD, after call 1 passed): the keys kernel's speed. The harness's fp8 variant (BF16 q
# over an E4M3 copy of the pool) and its fp8keys variant (the same plan made under MLAV_SM90_KERNEL=keys)
# beside the BF16 cache, in one process, two rounds, at B {1, 16} x H {8, 16} x q_len {1, 2} x prefix
# {4k, 32k, 131k}
# (H 16, q_len 2 is 32 rows: the seesaw in both runs, the control); `mlaverify bench` with both caches
# and the engine path at B 1, q_len 1; then Nsight Compute on the keys kernel at B 16, H 8 and 16,
# q_len 1, 131k.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
B=$PWD/build-s49
[ -f $B/libmlaverify.so ] || { cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF \
  -DMLAV_BUILD_TESTS=OFF > /tmp/build.log 2>&1 && cmake --build $B -j16 --target mlaverify mlaverify_cli \
  >> /tmp/build.log 2>&1; echo "build rc=$?"; }
el built
# the harness with the fp8keys variant (harness-fp8keys.patch: the fp8 variant's plan made under
# MLAV_SM90_KERNEL=keys), applied to .peer once
grep -q fp8keys .peer/flashmla/bench_flashmla.py || (cd .peer/flashmla && patch -p1 -s < ../../bench/plans/s49/harness-fp8keys.patch) \
  || echo "harness patch failed"
H() { # out
  MLAVERIFY_LIBRARY=$B/libmlaverify.so PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1 \
    MLAV_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo head) \
    timeout $(lim 140) python3 .peer/flashmla/bench_flashmla.py --out $1 --libs mlaverify \
    --variants=fp8,fp8keys --batch 1,16 --heads 8,16 --qlen 1,2 --prefix 4096,32768,131072 \
    --copy-gib 0.25 --mm-n 1024 --ref-requests first,last --budget 115 --rep-ms 60 > $1.log 2>&1
  echo "harness $1 rc=$?"; tail -1 $1.log | cut -c1-200; grep -E "geomean" $1/variants.md
}
mkdir -p /tmp/o; ncli=0
H /tmp/o/r1; H /tmp/o/r2
el harness
# the CLI's FP8 rows beside the BF16 cache's, and the engine path (a plan for limits 1.5x the lengths,
# its STEP instance) against the exact plan, B 1, H 8 and 16, q_len 1 (the production preset's)
for k in keys ""; do
  n=cli-${k:-rule}-$((++ncli))
  MLAV_SM90_KERNEL=$k timeout $(lim 45) $B/mlaverify bench --backend cuda --heads 8,16 --qlen 1 \
    --prefix 4096,32768,131072 --kv-dtype bf16,fp8 --engine 1.5 --csv /tmp/o/$n.csv > /tmp/o/$n.log 2>&1
  echo "$n rc=$?"; tail -3 /tmp/o/$n.log
done
el cli
for h in 8 16; do # as session 43's profile of the seesaw's FP8 path (bench/results/2026-12-04-h200-s43)
  MLAV_SM90_KERNEL=keys timeout $(lim 70) ncu --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section WarpStateStats -k regex:keys -c 1 \
    $B/mlaverify bench --backend cuda --batch 16 --heads $h --qlen 1 --prefix 131072 --kv-dtype fp8 \
    --reps 3 > /tmp/o/ncu-h$h.txt 2>&1
  echo "ncu h$h rc=$?"; grep -E "Duration|DRAM Throughput|L1/TEX Cache|Compute \(SM\)" /tmp/o/ncu-h$h.txt
done
el ncu
tar -czf $OUT/o.tgz -C /tmp o
el done
