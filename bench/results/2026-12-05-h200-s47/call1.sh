#!/usr/bin/env bash
# Session 47 call 1 (main ef1a0ee): FlashMLA side by side on HEAD (120 shapes, tree/page1/fp8 variants, abba),
# then ncu kernel durations of both libraries at B {1,16} x H {8,16} x q_len {1,9}, 4096, then test_steps_gpu
# and test_steps_gpu_seesaw (the step code ef1a0ee restructured).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
C=${C:-ef1a0ee}
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=ON"
rm -rf /tmp/src-r && mkdir /tmp/src-r && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-r
rm -rf /tmp/peer && mkdir -p /tmp/peer
( COMMIT=$C FLASHMLA_PREBUILT_SPLITKV=1 PHASE=build OUT=/tmp/peer MAX_JOBS=8 bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/build.log 2>&1; echo "peer build rc=$?" ) &
peer=$!
( cmake -S /tmp/src-r -B build-r $cfg > build-r.log 2>&1 && cmake --build build-r -j8 --target test_steps_gpu >> build-r.log 2>&1 || echo "build-r failed" ) &
br=$!
wait $peer $br
el "built (peer and ours)"
left=$(( ${HB:-320} - ($(date +%s) - t0) ))
COMMIT=$C PHASE=bench TOTAL_BUDGET=$left BENCH_ARGS="--variants=tree,page1,fp8 --order abba --warmup-ms 150" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
tail -3 /tmp/peer/summary.txt 2>/dev/null; grep -E "copy ceiling|matmul" /tmp/peer/bench.log | head -3
tar -czf $OUT/flashmla.tgz -C /tmp peer
el harness
m=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__registers_per_thread
rm -rf /tmp/ncu-h; mkdir -p /tmp/ncu-h
MLAVERIFY_LIBRARY=/tmp/mlav-build/libmlaverify.so PYTHONPATH=/tmp/src-r/python PYTHONDONTWRITEBYTECODE=1 \
  timeout $(lim 90) ncu --clock-control none --metrics $m -k regex:'splitkv_mla|mla_combine|flash_sm90|combine' --csv \
  --log-file $OUT/ncu.csv python3 .peer/flashmla/bench_flashmla.py --out /tmp/ncu-h --batch 1,16 --heads 8,16 --qlen 1,9 \
  --prefix 4096 --variants= --warmup-ms 1 --rep-ms 1 --order fm --budget 70 --copy-gib 0.25 --mm-n 1024 \
  --flashmla-build /tmp/flashmla-build > /tmp/ncu-h/stdout.log 2>&1
echo "ncu rc=$? lines $(wc -l < $OUT/ncu.csv)"; cp /tmp/ncu-h/results.md $OUT/ncu-results.md 2>/dev/null; tail -3 /tmp/ncu-h/stdout.log
el ncu
(cd build-r && timeout $(lim 200) ctest -j2 --timeout 190 -R "^test_steps_gpu(_seesaw)?$" > ../r-ctest.log 2>&1
 echo "r ctest rc=$?"; grep -E "tests passed|\*\*\*|Failed|Passed" ../r-ctest.log | head -20)
tar -czf $OUT/logs.tgz build-*.log r-*.log build-r/Testing/Temporary/LastTest.log 2>/dev/null
el done
