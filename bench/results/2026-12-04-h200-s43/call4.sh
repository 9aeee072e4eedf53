#!/usr/bin/env bash
# Session 43 call 4: the step combine's column blocks as the exact plan's (the waves uncapped by
# the limits' reservation: bench/results/2026-12-04-h200-s43/stepq.patch). Trees: b = the working tree with the patch reversed,
# k = the working tree. The production preset through the engine path (limits 1.0), two rounds
# in alternating order; k's engine-step tests (fewer steps) and graph tests.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 585 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
for v in b k; do
  rm -rf /tmp/src-$v build-$v && mkdir /tmp/src-$v && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v = b ] && { (cd /tmp/src-b && git apply -R "$OLDPWD/bench/results/2026-12-04-h200-s43/stepq.patch") || echo "apply b failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF; j=6
  [ $v = k ] && { tg="mlaverify_cli test_steps_gpu test_cuda_gpu"; tests=-DMLAV_BUILD_TESTS=ON; j=10; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j$j --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
orders=("b k" "k b")
for r in 1 2; do
  for v in ${orders[$((r - 1))]}; do
    timeout $(lim 150) build-$v/mlaverify bench --backend cuda --preset production --engine 1.0 \
      --engine-csv eng-$v-$r.csv --reps 15 --min-reps 5 --max-seconds 0.5 > bench-$v-$r.log 2>&1 || echo "bench $v $r rc=$?"
  done
  el "round $r"
  python3 bench/diag/engine_cmp.py eng-b-$r.csv eng-k-$r.csv k$r | tail -1
done
python3 - <<'PY'
import csv, math
def rows(p):
    return {(r['batch'],r['heads'],r['q_len'],r['prefix']):(float(r['exact_us']),float(r['run_us'])) for r in csv.DictReader(open(p))}
g=lambda x: math.exp(sum(map(math.log,x))/len(x))
d={v:[rows('eng-%s-%d.csv'%(v,r)) for r in (1,2)] for v in 'bk'}
keys=sorted(d['b'][0], key=lambda k: tuple(map(int,k)))
rb,rk,kb=[],[],[]
for k in keys:
    try:
        eb=min(d['b'][0][k][0],d['b'][1][k][0]); ub=min(d['b'][0][k][1],d['b'][1][k][1])
        ek=min(d['k'][0][k][0],d['k'][1][k][0]); uk=min(d['k'][0][k][1],d['k'][1][k][1])
    except KeyError: continue
    rb.append(ub/eb); rk.append(uk/ek); kb.append(uk/ub)
    print(' '.join(k), 'b run/exact %.3f  k run/exact %.3f  k/b run %.3f  exact k/b %.3f'%(ub/eb,uk/ek,uk/ub,ek/eb))
print('GEOMEAN b run/exact %.4f  k run/exact %.4f  k/b run %.4f; within 3%%: b %d k %d of %d'%(g(rb),g(rk),g(kb),sum(x<=1.03 for x in rb),sum(x<=1.03 for x in rk),len(rb)))
PY
el ab
MLAV_TEST_STEPS=40 timeout $(lim 150) build-k/tests/test_steps_gpu > k-steps.log 2>&1; echo "k test_steps_gpu (40 steps) rc=$? $(grep -E 'PASSED|FAILED' k-steps.log | tr '\n' ' ')"
MLAV_TEST_FILTER="test_cuda_graph*" timeout $(lim 100) build-k/tests/test_cuda_gpu > k-graph.log 2>&1; echo "k test_cuda_graph* rc=$? $(grep -E 'PASSED|FAILED' k-graph.log | tr '\n' ' ')"
el tests
mkdir -p out && cp eng-*.csv out/ && tar -czf $OUT/call4.tgz out build-*.log bench-*.log k-*.log
