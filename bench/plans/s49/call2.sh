#!/usr/bin/env bash
# Session 49 call 2 (HEAD, after call 1 passed): the keys kernel's speed. The harness's fp8 variant (BF16 q
# over an E4M3 copy of the pool) beside the BF16 cache, with MLAV_SM90_KERNEL=keys and without, in the
# order base, keys, keys, base, at B {1, 16} x H {8, 16} x q_len {1, 2} x prefix {4k, 32k, 131k}
# (H 16, q_len 2 is 32 rows: the seesaw in both runs, the control); `mlaverify bench` with both caches
# and the engine path at B 1, q_len 1; then Nsight Compute on the keys kernel at B 16, H 8 and 16,
# q_len 1, 131k.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
B=$PWD/build-s49
[ -f $B/libmlaverify.so ] || { cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF \
  -DMLAV_BUILD_TESTS=OFF > /tmp/build.log 2>&1 && cmake --build $B -j16 --target mlaverify mlaverify_cli \
  >> /tmp/build.log 2>&1; echo "build rc=$?"; }
el built
H() { # out kernel-env
  MLAV_SM90_KERNEL=$2 MLAVERIFY_LIBRARY=$B/libmlaverify.so PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1 \
    MLAV_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo head)+${2:-rule} \
    timeout 120 python3 .peer/flashmla/bench_flashmla.py --out $1 --libs mlaverify --variants=fp8 \
    --batch 1,16 --heads 8,16 --qlen 1,2 --prefix 4096,32768,131072 --copy-gib 0.25 --mm-n 1024 \
    --ref-requests first,last --budget 100 --rep-ms 60 > $1.log 2>&1
  echo "harness $1 ($2) rc=$?"; tail -1 $1.log | cut -c1-200
}
mkdir -p /tmp/o; ncli=0
H /tmp/o/base1 ""; H /tmp/o/keys1 keys; H /tmp/o/keys2 keys; H /tmp/o/base2 ""
el harness
# the CLI's FP8 rows beside the BF16 cache's, and the engine path (a plan for limits 1.5x the lengths,
# its STEP instance) against the exact plan, B 1, H 8 and 16, q_len 1 (the production preset's)
for k in "" keys keys ""; do
  n=cli-${k:-rule}-$((++ncli))
  MLAV_SM90_KERNEL=$k timeout 60 $B/mlaverify bench --backend cuda --heads 8,16 --qlen 1 \
    --prefix 4096,32768,131072 --kv-dtype bf16,fp8 --engine 1.5 --csv /tmp/o/$n.csv > /tmp/o/$n.log 2>&1
  echo "$n rc=$?"; tail -3 /tmp/o/$n.log
done
el cli
m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,sm__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,launch__registers_per_thread
for h in 8 16; do
  MLAV_SM90_KERNEL=keys timeout 90 ncu --metrics $m -k regex:keys -c 2 --csv --log-file /tmp/o/ncu-h$h.csv \
    env MLAVERIFY_LIBRARY=$B/libmlaverify.so PYTHONPATH=$PWD/python python3 .peer/flashmla/bench_flashmla.py \
    --out /tmp/o/ncu-h$h --libs mlaverify --variants=fp8 --batch 16 --heads $h --qlen 1 --prefix 131072 \
    --copy-gib 0.25 --mm-n 1024 --ref-requests none --warmup-ms 1 --rep-ms 1 --budget 60 > /tmp/o/ncu-h$h.log 2>&1
  echo "ncu h$h rc=$?"
done
el ncu
tar -czf $OUT/o.tgz -C /tmp o
el done
