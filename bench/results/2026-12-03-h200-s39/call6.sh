#!/usr/bin/env bash
# Session 39, call 6 (main 39b7ee3: calls 4 and 5's changes landed; .debs and .peer carried, the
# harness with bench/results/2026-12-03-h200-s37/harness-order.patch): FlashMLA side by side at
# the 120 shapes with the tree, page1 and fp8 variants, as session 37's call 4 (--order abba:
# FlashMLA, mlaverify, mlaverify, FlashMLA; do_bench warm-up 150 ms). The page-64 kernels are
# session 37's (their SASS unchanged since); page1 runs the GATHER instance of bdb4ed1.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 470 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
q=clocks_event_reasons.active; nvidia-smi --query-gpu=$q --format=csv > /dev/null 2>&1 || q=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$q --format=csv,noheader -lms 100 > /tmp/smi.csv 2>&1 &
smi=$!
rm -rf /tmp/src-m && mkdir /tmp/src-m && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-m
rm -rf /tmp/peer && mkdir -p /tmp/peer
COMMIT=39b7ee3 FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=$(lim 440) BENCH_ARGS="--variants=tree,page1,fp8 --order abba --warmup-ms 150" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-m > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
kill $smi; gzip -c /tmp/smi.csv > /tmp/peer/smi.csv.gz
tail -3 /tmp/peer/summary.txt 2>/dev/null
python3 - <<'PY' | tee /tmp/peer/order.txt
import json, math
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
rows = [json.loads(l) for l in open('/tmp/peer/results.jsonl') if l.strip()][1:]
rows = [r for r in rows if r.get('flashmla') and r.get('mlaverify') and len(r['flashmla'].get('us_runs', [])) == 2]
fm = [r['flashmla']['us_runs'][0] / r['mlaverify']['us_runs'][0] for r in rows]   # FlashMLA timed first
mf = [r['flashmla']['us_runs'][1] / r['mlaverify']['us_runs'][1] for r in rows]   # mlaverify timed first
ab = [r['flashmla']['us'] / r['mlaverify']['us'] for r in rows]
print('%d shapes: FlashMLA time / ours, geomean: FlashMLA first %.3f, ours first %.3f, abba mean %.3f' % (len(rows), g(fm), g(mf), g(ab)))
for B in (1, 16):
    s = [i for i, r in enumerate(rows) if r['B'] == B]
    print('  B %d (%d): FlashMLA first %.3f, ours first %.3f, abba %.3f, ours faster or equal at %d' % (B, len(s), g([fm[i] for i in s]), g([mf[i] for i in s]), g([ab[i] for i in s]), sum(ab[i] >= 1 for i in s)))
print('  FlashMLA run 2 / run 1 %.3f; ours run 2 / run 1 %.3f' % (g([r['flashmla']['us_runs'][1] / r['flashmla']['us_runs'][0] for r in rows]), g([r['mlaverify']['us_runs'][1] / r['mlaverify']['us_runs'][0] for r in rows])))
PY
tar -czf $OUT/flashmla.tgz -C /tmp peer
el done
