#!/usr/bin/env bash
# call 5 (main a67fbbe: the seesaw kernel landed with its rule), in the session's last device
# minutes: test_sm90_gpu (legal, producer, seesaw kernels against the oracle), compute-sanitizer
# racecheck / synccheck / memcheck / initcheck on the TMA cases (the seesaw kernel among them),
# then FlashMLA beside mlaverify (../shared/peers/flashmla + the extension) in what is left
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cmake -S . -B build -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF > build.log 2>&1
cmake --build build -j16 --target test_sm90_gpu test_sm90_layouts_gpu sm90_timing mlaverify_cli >> build.log 2>&1 || { grep -m10 error build.log; exit 1; }
el test_sm90_gpu
MLAV_SM90_CASES=6 timeout 120 build/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
grep -E "seed|PASSED|FAILED|\[  ERROR" $OUT/test_sm90.log | head -14; echo "ss lines: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
timeout 60 build/tests/test_sm90_layouts_gpu 2>&1 | grep -E "FAIL|^PASS" | tail -2
for tool in racecheck synccheck memcheck initcheck; do
  el $tool
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 \
    build/tests/test_sm90_gpu > $OUT/$tool.log 2>&1; echo "$tool rc=$? ss cases: $(grep -c '^  ss ' $OUT/$tool.log)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/$tool.log | tail -1
done
tar -czf $OUT/logs.tgz -C $OUT test_sm90.log racecheck.log synccheck.log memcheck.log initcheck.log && \
  rm -f $OUT/test_sm90.log $OUT/racecheck.log $OUT/synccheck.log $OUT/memcheck.log $OUT/initcheck.log
el flashmla
[ $(( 225 - ($(date +%s) - t0) )) -gt 90 ] || { echo "no time left for FlashMLA"; exit 0; }
left=$(( 225 - ($(date +%s) - t0) ))
COMMIT=a67fbbe FLASHMLA_PREBUILT_SPLITKV=1 BENCH_ARGS="--variants=" TOTAL_BUDGET=$(( left > 300 ? 300 : left - 20 )) \
  OUT=$OUT/peer timeout $(( left - 5 )) bash .peer/flashmla/run.sh . 2>&1 | tail -8
( cd $OUT/peer && tar czf ../peer-logs.tgz $(ls | grep -v -E '^(results.md|variants.md|results.jsonl|summary.txt)$') &&
  ls | grep -v -E '^(results.md|variants.md|results.jsonl|summary.txt)$' | xargs rm -rf )
el done; ls $OUT $OUT/peer
