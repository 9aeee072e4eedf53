#!/usr/bin/env bash
# Session 47 call 2 (main ef1a0ee; the nopdl build and round of its first run were dropped from this, the rerun): why ours loses ~10 us to FlashMLA at B 16, 4096 between ncu's kernel
# durations (ours faster) and the harness (ours slower). Three builds: base, pdl-late (the sm90 split kernels
# trigger the combine's launch after their loop, as FlashMLA does), nopdl (no programmatic launch). The harness
# with --flush-modes zero,read,none (harness-flush.patch) per build, ABAB; then mlaverify bench per build.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=$PWD
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
mk() {
  rm -rf /tmp/src-$1 && mkdir /tmp/src-$1 && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$1
  [ -z "${2:-}" ] || (cd /tmp/src-$1 && patch -p1 -s < $R/build-s47/$2) || { echo "patch $2 failed"; return 1; }
  cmake -S /tmp/src-$1 -B /tmp/b-$1 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > /tmp/b-$1.log 2>&1 \
    && cmake --build /tmp/b-$1 -j5 --target mlaverify mlaverify_cli >> /tmp/b-$1.log 2>&1
  echo "build $1 rc=$?"
}
rm -rf /tmp/peer /tmp/h-* /tmp/cli-* /tmp/o && mkdir -p /tmp/peer
[ -d /tmp/flashmla-build ] || ( COMMIT=ef1a0ee FLASHMLA_PREBUILT_SPLITKV=1 PHASE=build OUT=/tmp/peer MAX_JOBS=4 MLAV_BUILD=/tmp/b-peer bash .peer/flashmla/run.sh . > /tmp/peer/build.log 2>&1; echo "peer build rc=$?" ) &
[ -x /tmp/b-late/mlaverify ] || { mk base "" & mk late pdl-late.patch & }
wait
el built
h() { # variant round
  MLAVERIFY_LIBRARY=/tmp/b-$1/libmlaverify.so PYTHONPATH=/tmp/src-$1/python PYTHONDONTWRITEBYTECODE=1 MLAV_COMMIT=ef1a0ee+$1 \
    timeout $(lim 80) python3 .peer/flashmla/bench_flashmla.py --out /tmp/h-$1-$2 --batch 16 --heads 8,16,64 --qlen 1,9 \
    --prefix 4096 --variants= --order abba --flush-modes zero,read,none --copy-gib 1 --mm-n 4096 --budget 70 \
    --rep-ms 80 --flashmla-build /tmp/flashmla-build > /tmp/h-$1-$2.log 2>&1
  echo "harness $1 round $2 rc=$?"; grep -h "flush modes\|B=16" /tmp/h-$1-$2.log | cut -c1-220
}
h base 1; h late 1; h late 2; h base 2
el harness
for v in base late base late; do
  timeout $(lim 40) /tmp/b-$v/mlaverify bench --backend cuda --batch 16 --heads 8,16,64 --qlen 1,9 --prefix 4096 \
    --page-size 64 --reps 200 --max-seconds 1 --csv /tmp/cli-$v-$(date +%s).csv > /dev/null 2>&1; echo "cli $v rc=$?"
done
el cli
mkdir -p /tmp/o && cp /tmp/h-*.log /tmp/o/ && for d in /tmp/h-*-*/; do cp $d/flush.jsonl /tmp/o/$(basename $d).flush.jsonl 2>/dev/null; cp $d/results.jsonl /tmp/o/$(basename $d).results.jsonl; done
cp /tmp/cli-*.csv /tmp/o/ ; cp /tmp/peer/build.log /tmp/o/peer-build.log; tail -n 5 /tmp/b-*.log > /tmp/o/builds.log
tar -czf $OUT/call2.tgz -C /tmp o
el done
