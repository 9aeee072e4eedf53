#!/usr/bin/env bash
# session 30, call 1, from the checkout's root with .debs carried:
#   bash bench/results/2026-12-02-h200-s30/call1.sh
# The seesaw kernel's gathered refill without waits (cp.async.mbarrier.arrive, row page ids a
# pair ahead), so page_size 1 and FP8 caches take it: test_kernel_rules, test_sm90_gpu (the
# seesaw on every case), sm90_timing 15 of the base tree (HEAD of the device copy) and of this
# one (the rule, and MLAV_SM90_KERNEL=producer), then `mlaverify bench` BF16 beside FP8 (the new
# rule: seesaw) and FP8 on the legal family.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 570 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
rm -rf /tmp/base && mkdir -p /tmp/base && git archive HEAD | tar -x -C /tmp/base
echo "base: $(git rev-parse HEAD)"
{ cmake -S /tmp/base -B build-base -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DMLAV_NCCL=OFF > base.log 2>&1 && cmake --build build-base -j6 --target sm90_timing >> base.log 2>&1; } &
{ cmake -S . -B build-s30 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DMLAV_NCCL=OFF > build.log 2>&1 &&
  cmake --build build-s30 -j12 --target mlaverify_cli test_sm90_gpu sm90_timing test_kernel_rules >> build.log 2>&1; } ||
  { echo "build failed"; grep -m12 -E "error|Error" build.log; }
wait
grep -E "spill|Used 2[0-9][0-9] registers" build.log | sort | uniq -c | head -6
[ -x build-base/tests/sm90_timing ] || { echo "base build failed"; grep -m8 -E "error|Error" base.log; }
el built
build-s30/tests/test_kernel_rules > $OUT/rules.log 2>&1; echo "test_kernel_rules rc=$?"
el test_sm90_gpu
MLAV_SM90_CASES=6 timeout $(lim 150) build-s30/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
grep -E "seed|PASSED|FAILED|\[  ERROR|\[  FAILED" $OUT/test_sm90.log | head -12
echo "ss runs: $(grep -c '^  ss ' $OUT/test_sm90.log) ok: $(grep '^  ss ' $OUT/test_sm90.log | grep -c ': ok')"
grep '^  ss ' $OUT/test_sm90.log | grep -v ': ok' | head -5
for k in base new producer; do
  el timing $k
  case $k in
    base) timeout $(lim 40) build-base/tests/sm90_timing 15 > $OUT/timing-$k.txt 2>&1 ;;
    new) timeout $(lim 40) build-s30/tests/sm90_timing 15 > $OUT/timing-$k.txt 2>&1 ;;
    producer) MLAV_SM90_KERNEL=producer timeout $(lim 40) build-s30/tests/sm90_timing 15 > $OUT/timing-$k.txt 2>&1 ;;
  esac
  echo "rc=$? $(tail -1 $OUT/timing-$k.txt)"
done
python3 - $OUT <<'PY' | tee $OUT/timing-ab.txt
import sys, math, os
def rows(f):
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            try: r[' '.join(a[0].split())] = float(a[1].split()[3])
            except Exception: pass
    return r
d = sys.argv[1]
t = {k: rows("%s/timing-%s.txt" % (d, k)) for k in ("base", "new", "producer")}
ks = [k for k in t["new"] if all(k in v for v in t.values())]
print("sm90/64 column (us): base tree (default), this tree (default), this tree MLAV_SM90_KERNEL=producer")
for k in ks:
    print("%-30s base %8.1f new %8.1f producer %8.1f  new/base %.3f new/producer %.3f" % (k, t["base"][k], t["new"][k], t["producer"][k], t["new"][k] / t["base"][k], t["new"][k] / t["producer"][k]))
g = [math.log(t["new"][k] / t["base"][k]) for k in ks if ' 64 ' in ' %s ' % k and 'chain' in k]
if g: print("geomean new/base over %d chain page-64 points: %.3f" % (len(g), math.exp(sum(g) / len(g))))
PY
for b in 16 1; do
  el "bench B $b bf16,fp8 (default)"
  timeout $(lim 100) build-s30/mlaverify bench --backend cuda --batch $b --heads 8,16,128 --qlen 1,16 \
    --prefix 4096,32768,131072 --page-size 64 --kv-dtype bf16,fp8 --reps 20 --min-reps 10 \
    --csv $OUT/fp8-b$b.csv > $OUT/fp8-b$b.txt 2>&1; echo "rc=$?"
  el "bench B $b fp8 (legal)"
  MLAV_FLASH_FAMILY=legal timeout $(lim 60) build-s30/mlaverify bench --backend cuda --batch $b --heads 8,16,128 --qlen 1,16 \
    --prefix 4096,32768,131072 --page-size 64 --kv-dtype fp8 --reps 20 --min-reps 10 \
    --csv $OUT/fp8legal-b$b.csv > $OUT/fp8legal-b$b.txt 2>&1; echo "rc=$?"
done
python3 - $OUT <<'PY' | tee $OUT/fp8-ab.txt
import sys, csv, os, math
d = sys.argv[1]
def load(f):
    r = {}
    if not os.path.exists(f): return r
    for row in csv.DictReader(open(f)):
        if row['backend'] != 'cuda': continue
        r[(int(row['batch']), int(row['heads']), int(row['q_len']), int(row['prefix']), row['kv_dtype'])] = float(row['time_us'])
    return r
a = {}; l = {}
for b in (16, 1):
    a.update(load("%s/fp8-b%d.csv" % (d, b))); l.update(load("%s/fp8legal-b%d.csv" % (d, b)))
print("B H q_len prefix: bf16 (default) us, fp8 (default: sm90 seesaw) us, fp8 (legal) us; bf16/fp8, bf16/fp8legal, fp8/fp8legal")
g1 = []; g2 = []
for k in sorted(x for x in a if x[4] == 'bf16'):
    kf = k[:4] + ('fp8_e4m3',)
    if kf in a and kf in l:
        print("%3d %4d %3d %7d  %9.1f %9.1f %9.1f   %.3f %.3f %.3f" % (k[0], k[1], k[2], k[3], a[k], a[kf], l[kf], a[k] / a[kf], a[k] / l[kf], a[kf] / l[kf]))
        g1.append(math.log(a[k] / a[kf])); g2.append(math.log(a[kf] / l[kf]))
if g1: print("geomean bf16/fp8 %.3f, fp8 seesaw/legal %.3f over %d points" % (math.exp(sum(g1)/len(g1)), math.exp(sum(g2)/len(g2)), len(g1)))
PY
for tf in test_sm90_fp8_random test_sm90_random; do
  el "memcheck $tf"
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=$tf timeout $(lim 60) compute-sanitizer --tool memcheck \
    --error-exitcode 99 build-s30/tests/test_sm90_gpu > $OUT/memcheck-$tf.log 2>&1
  echo "memcheck rc=$? ss runs: $(grep -c '^  ss ' $OUT/memcheck-$tf.log) ok: $(grep '^  ss ' $OUT/memcheck-$tf.log | grep -c ': ok') $(grep -E 'ERROR SUMMARY' $OUT/memcheck-$tf.log | tail -1)"
done
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log *.txt 2>/dev/null | grep -v -e timing-ab -e fp8-ab) && (cd $OUT && rm -f *.log fp8-b*.txt fp8legal-*.txt timing-base.txt timing-producer.txt)
el done
