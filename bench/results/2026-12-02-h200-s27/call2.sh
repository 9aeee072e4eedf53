#!/usr/bin/env bash
# call 2: the TMA rule (d1c68ce: TMA tiles only in blocks of a request of more than 64 rows)
# against main (43c1feb): sm90_timing of each twice, interleaved; test_sm90_gpu on the rule's
# build; compute-sanitizer racecheck / synccheck / memcheck / initcheck of test_sm90_tma_tiles
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
el build
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { local s=$1 d=$2; shift 2
  { cmake -S $s -B $d $cfg > $d.log 2>&1 && cmake --build $d -j8 --target "$@" >> $d.log 2>&1; } ||
    { echo "$d failed"; grep -m5 error $d.log; }; }
b . build-main sm90_timing &
b .ab-base/rule build-rule sm90_timing test_sm90_gpu &
wait
el timing
for v in main rule mainb ruleb; do
  timeout 60 build-${v%b}/tests/sm90_timing 15 > $OUT/timing-$v.txt 2>&1; echo "$v rc=$? $(tail -1 $OUT/timing-$v.txt)"
done
python3 - $OUT <<'PY'
import sys, math
def rows(f):
    r = {}
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            v = a[1].split(); r[' '.join(a[0].split())] = (float(v[0]), float(v[1]), float(v[3]))
    return r
d = sys.argv[1]
R = {v: rows(d + '/timing-%s.txt' % v) for v in ('main', 'rule', 'mainb', 'ruleb')}
print("sm90/64 column (the sm90 family's own schedule): time, rule / main")
print("%-26s %8s %8s %8s %8s %7s %7s" % ("point", "main", "rule", "mainb", "ruleb", "r/m", "rb/mb"))
lr = []; lb = []
for k in R['main']:
    a, b, c, e = (R[v][k][2] for v in ('main', 'rule', 'mainb', 'ruleb'))
    lr.append(math.log(b / a)); lb.append(math.log(e / c))
    print("%-26s %8.1f %8.1f %8.1f %8.1f %7.3f %7.3f" % (k, a, b, c, e, b / a, e / c))
print("geomean rule/main (sm90/64): %.3f, again %.3f" % (math.exp(sum(lr) / len(lr)), math.exp(sum(lb) / len(lb))))
PY
el test_sm90_gpu
timeout 120 build-rule/tests/test_sm90_gpu > $OUT/test_sm90.log 2>&1; echo "test_sm90_gpu rc=$?"
grep -E "PASSED|FAILED|\[  ERROR" $OUT/test_sm90.log | head
for tool in racecheck synccheck memcheck initcheck; do
  el $tool
  MLAV_SM90_CASES=3 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout 75 compute-sanitizer --tool $tool --error-exitcode 99 \
    build-rule/tests/test_sm90_gpu > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|Error" $OUT/san-$tool.log | tail -3
done
el done
