#!/usr/bin/env bash
# Session 37, call 3 (a diagnosis of main b97a14a, nothing here lands): the FlashMLA harness timed
# mlaverify 8% slower (geomean, 108 shapes) than `mlaverify bench` timed the same tree in call 1,
# and 12-20% slower at B 16, H 8 and 16, q_len 9 and 16, 131k, but not at B 16, H 128. Is it
# the GPU's clocks under the harness's sustained replays (do_bench: 25 ms warm-up, 100 ms of
# replays a library and shape)? nvidia-smi samples clocks and power every 50 ms through: the
# harness at 6 shapes (B 16, H 8, 16 and 128, q_len 9 and 16, 131k; FlashMLA then mlaverify each,
# rep 400 ms; then mlaverify alone without the NaN page tails), then `mlaverify bench` at the same
# shapes with 15 replays and with 400.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" >> $OUT/marks.txt; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
q=clocks_event_reasons.active; nvidia-smi --query-gpu=$q --format=csv > /dev/null 2>&1 || q=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$q --format=csv,noheader -lms 50 > $OUT/smi.csv 2>&1 &
smi=$!
rm -rf /tmp/src-m && mkdir /tmp/src-m && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-m
( cmake -S /tmp/src-m -B build-m -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
  -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > build-m.log 2>&1 &&
  cmake --build build-m -j8 --target mlaverify_cli >> build-m.log 2>&1 || echo "build-m failed" ) &
el harness
rm -rf /tmp/peer && mkdir -p /tmp/peer
COMMIT=b97a14a FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=$(lim 200) \
  BENCH_ARGS="--batch 16 --heads 8,16,128 --qlen 9,16 --prefix 131072 --variants= --rep-ms 400" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-m > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
cat /tmp/peer/summary.txt 2>/dev/null | head -12
el "harness, mlaverify alone, no NaN tails"
mkdir -p /tmp/peer/nonan
PHASE=bench COMMIT=b97a14a FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=$(lim 60) \
  BENCH_ARGS="--batch 16 --heads 8,16,128 --qlen 9,16 --prefix 131072 --variants= --rep-ms 400 --libs mlaverify --no-nan-tail" \
  OUT=/tmp/peer/nonan bash .peer/flashmla/run.sh /tmp/src-m > /tmp/peer/nonan/run.log 2>&1 || echo "nonan rc=$?"
cat /tmp/peer/nonan/summary.txt 2>/dev/null | head -12
wait $(jobs -p | grep -v "^$smi$") 2>/dev/null
el "harness done"
for n in 15 400; do
  el "bench reps $n"
  timeout $(lim 120) build-m/mlaverify bench --backend cuda --batch 16 --heads 8,16,128 --qlen 9,16 --prefix 131072 \
    --page-size 64 --tree chain --reps $n --min-reps $n --max-seconds 20 --csv bench-$n.csv > bench-$n.log 2>&1 || echo "bench rc=$?"
  el "bench reps $n done"
done
kill $smi
cp bench-*.csv $OUT/ 2>/dev/null
grep -h "^[a-z]*,.*,16," bench-*.csv | cut -d, -f1-9 | head -20
tar -czf $OUT/peer.tgz -C /tmp peer
tar -czf $OUT/logs.tgz build-m.log bench-*.log
el done
