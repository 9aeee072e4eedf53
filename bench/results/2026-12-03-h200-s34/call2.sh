#!/usr/bin/env bash
# session 34, call 2 (call 1 was s33's next-shares.sh on branch s33-shares), from the checkout's
# root on branch s33-shares with .debs and .peer carried:
#   bash bench/results/2026-12-03-h200-s34/call2.sh
# Builds: base (main 1f3f2c9: shares.patch reversed), t (the branch with tile.patch: shares and
# the uniform schedule weighed in whole 64-key tiles), tk (t with tile.patch reversed: the branch
# as call 1 ran it, weighed by keys), each with sched-debug.patch (the
# exact plan prints its schedule's item count, longest item and a hash to stderr under
# MLAV_DEBUG_SCHED; diagnostic only, never committed to src). Why: call 1 measured t 1.17-1.32x
# base at B 1, q_len 16, 4096 (where shares are picked) and 0.94-0.97 at B 16 shapes where
# schedule_choices models the same schedule. Then FlashMLA beside t (fdf4750, without the debug
# patch) with the tree, page1 and fp8 variants.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
d=bench/results/2026-12-03-h200-s34
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
top=$(git ls-files | cut -d/ -f1 | sort -u)
for k in clean base t tk; do rm -rf /tmp/src-$k && mkdir -p /tmp/src-$k && cp -r $top /tmp/src-$k/ 2>/dev/null; done
for k in base; do (cd /tmp/src-$k && patch -R -p1 -s < $OLDPWD/$d/tile.patch &&
  patch -R -p1 -s < $OLDPWD/bench/results/2026-12-03-h200-s33/shares.patch) || echo "reverse $k failed"; done
for k in base t tk; do (cd /tmp/src-$k && patch -p1 -s < $OLDPWD/$d/sched-debug.patch) || echo "debug $k failed"; done
(cd /tmp/src-tk && patch -R -p1 -s < $OLDPWD/$d/tile.patch) || echo "tile reverse failed"
el build
for k in base t tk; do
  { cmake -S /tmp/src-$k -B /tmp/build-$k $cfg > build-$k.log 2>&1 &&
    cmake --build /tmp/build-$k -j5 --target mlaverify_cli $([ $k = t ] && echo test_sm90_gpu test_schedule_shares) >> build-$k.log 2>&1 || echo "build $k failed"; } &
done
wait
el built
/tmp/build-t/tests/test_schedule_shares > shares-host.log 2>&1; echo "test_schedule_shares rc=$?"
MLAV_SM90_CASES=6 timeout 150 /tmp/build-t/tests/test_sm90_gpu > test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
echo "ss runs: $(grep -c '^  ss ' test_sm90.log) ok: $(grep '^  ss ' test_sm90.log | grep -c ': ok') $(grep -E 'PASSED|FAILED' test_sm90.log | tail -3 | tr '\n' ' ')"
grep -A8 "test_sm90_shares" test_sm90.log | head -12
for r in 1 2; do for k in base t tk; do
  MLAV_DEBUG_SCHED=1 timeout 60 /tmp/build-$k/mlaverify bench --backend cuda --batch 1 --heads 64,128 --qlen 4,9,16 \
    --prefix 4096,4144,8192 --page-size 64 --reps 20 --min-reps 5 --csv b1-$k-$r.csv > b1-$k-$r.log 2> b1-$k-$r.sched || echo "b1 $k rc=$?"
  MLAV_DEBUG_SCHED=1 timeout 60 /tmp/build-$k/mlaverify bench --backend cuda --batch 16 --heads 16,64,128 --qlen 2,4,9 \
    --prefix 4096,32768 --page-size 64 --reps 20 --min-reps 5 --csv b16-$k-$r.csv > b16-$k-$r.log 2> b16-$k-$r.sched || echo "b16 $k rc=$?"
done; done
el benched
python3 - <<'PY' | tee $OUT/ab.txt
import csv, math, os, re
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
key = ('heads', 'q_len', 'prefix')
def load(f):
    return [({k: x[k] for k in key}, float(x['time_us'])) for x in csv.DictReader(open(f))] if os.path.exists(f) else []
def sched(f):
    # SCHED B b H h T t kv n ...: keyed by (H, q_len, prefix)
    out = {}
    for l in (open(f) if os.path.exists(f) else []):
        if l.startswith('SCHED'):
            s = l.split(); B, H, T, kv = int(s[2]), int(s[4]), int(s[6]), int(s[8])
            out[(H, T // B, kv // B - T // B)] = s
    return out
for B in ('b1', 'b16'):
    rows = {}
    for k in ('base', 't', 'tk'):
        for r in (1, 2):
            sc = sched('%s-%s-%d.sched' % (B, k, r))
            for c, us in load('%s-%s-%d.csv' % (B, k, r)):
                kk = (int(c['heads']), int(c['q_len']), int(c['prefix']))
                s = sc.get(kk)
                e = rows.setdefault(kk, {})
                e.setdefault(k, []).append(us)
                if s: e[k + 's'] = ' '.join(s[s.index('items'):s.index('items') + 2] + s[s.index('maxkeys'):])
    print(B, "H q prefix | base us | t/base tk/base | schedules (items, longest, hash) base / t / tk")
    for kk in sorted(rows):
        e = rows[kk]; b = min(e.get('base', [float('nan')]))
        print("%4d %3d %6d | %8.2f | %.3f %.3f | %s / %s / %s" % (kk + (b, min(e.get('t', [0])) / b, min(e.get('tk', [0])) / b,
              e.get('bases', '?'), e.get('ts', '?'), e.get('tks', '?'))))
PY
tar -czf $OUT/diag.tgz *.log *.sched *.csv
el flashmla
mkdir -p /tmp/peer
COMMIT=fdf4750 FLASHMLA_PREBUILT_SPLITKV=1 TOTAL_BUDGET=230 BENCH_ARGS="--variants=tree,page1,fp8" \
  OUT=/tmp/peer bash .peer/flashmla/run.sh /tmp/src-clean > /tmp/peer/run.log 2>&1 || echo "flashmla rc=$?"
tail -30 /tmp/peer/summary.txt 2>/dev/null
cp /tmp/peer/summary.txt /tmp/peer/results.jsonl $OUT/ 2>/dev/null
tar -czf $OUT/peer.tgz -C /tmp peer
el done
