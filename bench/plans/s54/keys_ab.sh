#!/usr/bin/env bash
# Session 54 (HEAD): the keys kernel's instruction variants, each A/B'd against HEAD in one call
# (bench/ab.sh, 3 rounds, FP8 cache, B 16, H {8, 16} x q_len {1, 2} x {32k, 131k}, page_size 64;
# H 16, q_len 2 is the seesaw's: the control). Timing only: the winner's tests are
# keys_variant.sh's (PATCH=<winner>.patch). VARIANTS (default "all3 qv vf-early s-chains2
# q-pairs", each A/B capped at what is left of CAP):
#   vf-early   V^T's fragments transposed as each S^T step makes K's (no K fragments kept to O^T);
#   q-pairs    Q's B fragments of two k16 steps by one 16-byte load (Q's rows 16 mod 128 bytes
#              apart, so the quarter warp's loads fall on distinct banks): 18 LDS fewer a tile;
#   s-chains2  S^T in two accumulators (two MMA chains of 9 steps, not one of 18);
#   qv         q-pairs and vf-early together;
#   all3       qv with s-chains2's two chains (the odd step of each 16-byte Q load into the second).
# Compiled here (the 16-row BF16 instance, instructions by the cubin's opcodes): 3,776 before;
# vf-early 3,752, q-pairs 3,760, s-chains2 3,768, qv 3,752, all3 3,760; no spills (239-254
# registers).
# Session 53's profile: ~551 instructions a warp a tile, 44 register moves, the kernel bound by
# its issue. Predicted: 0.95-0.98x at 8 and 16 rows for vf-early, qv and all3, 0.97-0.99x for the
# others, 1.00x at 32 rows.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o; rm -rf $O; mkdir -p $O
applied=
trap 'tar -czf $OUT/o.tgz -C /tmp o; [ -z "$applied" ] || patch -R -p1 -s < bench/plans/s54/$applied' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt 2>&1
rm -rf /tmp/base && mkdir /tmp/base
tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/base
for v in ${VARIANTS:-all3 qv vf-early s-chains2 q-pairs}; do
  patch -p1 -s < bench/plans/s54/$v.patch || { echo "patch $v failed"; continue; }
  applied=$v.patch
  OUT=$O/ab-$v ROUNDS=3 timeout $(lim 140) bash bench/ab.sh /tmp/base --backend cuda --batch 16 \
    --heads 8,16 --qlen 1,2 --prefix 32768,131072 --kv-dtype fp8 --page-size 64 > $O/ab-$v.log 2>&1
  echo "ab $v rc=$?"; tail -13 $O/ab-$v/ab.txt 2>/dev/null || tail -5 $O/ab-$v.log
  patch -R -p1 -s < bench/plans/s54/$v.patch && applied=
  el $v
done
el done
