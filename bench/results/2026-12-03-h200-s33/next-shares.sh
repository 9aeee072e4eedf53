#!/usr/bin/env bash
# Prepared in session 33 for the next device session (branch s33-shares), from the checkout's
# root with .debs carried:
#   bash bench/results/2026-12-03-h200-s33/next-shares.sh
# t: the branch (the exact plan weighs equal shares of the batch's KV tiles across requests:
# src/common/schedule_shares.c). Base: t with shares.patch reversed (`git diff main s33-shares --
# src tests bench/diag`, committed beside this script). test_schedule_shares; test_sm90_gpu (its
# test_sm90_shares: the shares schedules through the three kernels against the oracle) and
# racecheck on test_sm90_shares; mlaverify bench of both at the peer harness's B 16 shapes (60)
# and B 1, H 64 and 128, q_len 9 and 16 (12), two rounds; the production preset (exact plans and
# the engine path) of both. The model's predictions (build/bench/diag/schedule_choices --shares prints
# them for the harness's shapes and the production preset's batches): B 16,
# q_len 9, 4096 at 0.82 (H 64), 0.89 (H 16), 0.88 (H 128) of the uniform schedule's time.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 560 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
d=bench/results/2026-12-03-h200-s33
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
el build
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r $(git ls-files | cut -d/ -f1 | sort -u) /tmp/base/ 2>/dev/null
(cd /tmp/base && patch -R -p1 -s < $OLDPWD/$d/shares.patch) && echo "base: patch reversed"
{ cmake -S /tmp/base -B build-base $cfg > base.log 2>&1 && cmake --build build-base -j6 --target mlaverify_cli >> base.log 2>&1; } &
{ cmake -S . -B build-t $cfg > build-t.log 2>&1 &&
  cmake --build build-t -j10 --target test_sm90_gpu test_schedule_shares mlaverify_cli >> build-t.log 2>&1; } ||
  { echo "build-t failed"; grep -m12 -E "error|Error" build-t.log; }
wait
el built
build-t/tests/test_schedule_shares > shares-host.log 2>&1; echo "test_schedule_shares rc=$?"; grep -E "blocks|kept" shares-host.log
MLAV_SM90_CASES=6 timeout $(lim 150) build-t/tests/test_sm90_gpu > test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' test_sm90.log) ok: $(grep '^  ss ' test_sm90.log | grep -c ': ok') $(grep -E 'PASSED|FAILED' test_sm90.log | tail -2 | tr '\n' ' ')"
grep -A5 "test_sm90_shares:" test_sm90.log | head -6
MLAV_TEST_FILTER='test_sm90_shares' timeout $(lim 60) compute-sanitizer --tool racecheck --error-exitcode 99 \
  build-t/tests/test_sm90_gpu > racecheck.log 2>&1; echo "racecheck rc=$? $(grep SUMMARY racecheck.log | tail -1)"
for r in 1 2; do for k in base t; do
  el "bench $k $r"
  timeout $(lim 60) build-$k/mlaverify bench --backend cuda --batch 16 --heads 8,16,64,128 --qlen 1,2,4,9,16 \
    --prefix 4096,32768,131072 --page-size 64 --reps 20 --min-reps 5 --csv $OUT/b16-$k-$r.csv > b16-$k-$r.log 2>&1; echo "rc=$?"
  timeout $(lim 30) build-$k/mlaverify bench --backend cuda --batch 1 --heads 64,128 --qlen 9,16 \
    --prefix 4096,32768,131072 --page-size 64 --reps 20 --min-reps 5 --csv $OUT/b1-$k-$r.csv > b1-$k-$r.log 2>&1; echo "rc=$?"
done; done
for k in base t; do
  el "engine $k"
  timeout $(lim 60) build-$k/mlaverify bench --backend cuda --preset production --engine 1.5 \
    --engine-csv $OUT/engine-$k.csv > engine-$k.log 2>&1; echo "rc=$?"
done
python3 - $OUT <<'PY' | tee $OUT/ab.txt
import sys, csv, math, os
d = sys.argv[1]
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
key = ('batch', 'heads', 'q_len', 'prefix')
def load(f, col):
    if not os.path.exists(f): return {}
    return {tuple(x[k] for k in key): float(x[col]) for x in csv.DictReader(open(f))}
for r in (1, 2):
    for B in ('b16', 'b1'):
        a, n = load("%s/%s-base-%d.csv" % (d, B, r), 'time_us'), load("%s/%s-t-%d.csv" % (d, B, r), 'time_us')
        v = {k: n[k] / a[k] for k in a if k in n}
        if not v: continue
        print("round %d %s: t / base geomean %.3f (%.3f-%.3f) over %d" % (r, B, g(list(v.values())), min(v.values()), max(v.values()), len(v)))
        for k in sorted(v, key=lambda k: v[k])[:12]:
            print("   %-24s base %9.2f t %9.2f  %.3f" % (' '.join(k), a[k], n[k], v[k]))
        for k in [k for k in v if v[k] > 1.02]:
            print("   slower: %-24s base %9.2f t %9.2f  %.3f" % (' '.join(k), a[k], n[k], v[k]))
for col in ('exact_us', 'run_us'):
    a, n = load("%s/engine-base.csv" % d, col), load("%s/engine-t.csv" % d, col)
    v = [n[k] / a[k] for k in a if k in n]
    if v: print("engine %s t / base geomean %.3f (%.3f-%.3f) over %d" % (col, g(v), min(v), max(v), len(v)))
PY
tar -czf $OUT/logs.tgz *.log
el done
