#!/usr/bin/env bash
# Session 54: l2-first-v2.patch (the seesaw kernel's 16-bit KV copies with an L2
# evict_first policy where the plan reads at most 256 MB of KV; elsewhere the plain copies, not
# session 52's evict_normal hint, which took 1.02-1.05x the time at B 16, 32k and 131k past 4
# rows) against HEAD over the harness's 120 shapes (triton do_bench, its zero_ flush, --order
# abba) with the page1 and fp8 variants, B 1 then B 16, in the order base, ef2, ef2, base.
# Predicted from session 52's call 2 (H100): B 16, 4096 0.92-0.97x up to 256 rows a request, B 1
# 0.92-0.99x from 32k up to 256 rows (0.983 geomean over B 1), and 1.00x at B 16 from 32k.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=$PWD
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
mk() {
  rm -rf /tmp/src-$1 && mkdir /tmp/src-$1 && tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/src-$1
  [ -z "${2:-}" ] || (cd /tmp/src-$1 && patch -p1 -s < $R/bench/plans/s54/$2) || { echo "patch $2 failed"; return 1; }
  cmake -S /tmp/src-$1 -B /tmp/b-$1 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > /tmp/b-$1.log 2>&1 \
    && cmake --build /tmp/b-$1 -j7 --target mlaverify mlaverify_cli >> /tmp/b-$1.log 2>&1
  echo "build $1 rc=$?"
}
rm -rf /tmp/h3-* /tmp/o3 && mkdir -p /tmp/peer /tmp/o3
[ -d /tmp/flashmla-build ] || ( FLASHMLA_PREBUILT_SPLITKV=1 MAX_JOBS=4 bash .peer/flashmla/build.sh /tmp/flashmla-build > /tmp/peer/build.log 2>&1; echo "flashmla build rc=$?" ) &
[ -x /tmp/b-ef2/mlaverify ] || { mk base "" & mk ef2 l2-first-v2.patch & }
wait
el built
h() { # variant batch
  MLAVERIFY_LIBRARY=/tmp/b-$1/libmlaverify.so PYTHONPATH=/tmp/src-$1/python PYTHONDONTWRITEBYTECODE=1 MLAV_COMMIT=head+$1 \
    timeout $(lim 115) python3 .peer/flashmla/bench_flashmla.py --out /tmp/h3-$1-$2 --batch $2 --variants=page1,fp8 --order abba \
    --warmup-ms 100 --rep-ms 80 --copy-gib 4 --budget 105 --flashmla-build /tmp/flashmla-build > /tmp/h3-$1-$2.log 2>&1
  echo "harness $1 B $2 rc=$?"; tail -n 1 /tmp/h3-$1-$2/summary.txt
  cp /tmp/h3-$1-$2/results.jsonl /tmp/o3/$1-$2.results.jsonl; cp /tmp/h3-$1-$2/summary.txt /tmp/o3/$1-$2.summary.txt; cp /tmp/h3-$1-$2/variants.md /tmp/o3/$1-$2.variants.md
}
h base 1; h ef2 1; h ef2 16; h base 16
el harness
tar -czf $OUT/call2.tgz -C /tmp o3
el done
