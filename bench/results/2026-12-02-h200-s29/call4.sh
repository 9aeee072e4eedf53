#!/usr/bin/env bash
# session 29, call 4, from the checkout's root with .debs and .peer carried (.peer/flashmla:
# ../shared/peers/flashmla with session 27's flashmla/bench_flashmla-extension.patch applied):
#   COMMIT=<this tree's commit> bash bench/results/2026-12-02-h200-s29/call4.sh
# smem_base() lost the shared address space (alignment through an integer), so every access
# through it was a generic ld/st (PTX: 1,324 stores, 140 loads); MLAV90_SMEM_SHARED=1 aligns
# within the __shared__ array (st.shared / ld.shared). Both builds: racecheck on the seesaw's
# cases (does the epilogue's report go?), test_sm90_gpu on the variant, sm90_timing 15 of both
# twice, interleaved. Then FlashMLA beside mlaverify (the 120 shapes; the extension's variants
# off for lack of device time) in what is left of DEADLINE_S (460) s, the library built with
# MLAV90_SMEM_SHARED=1 (CUDAFLAGS, read by CMake's first configure) where the variant passed its
# tests and took less than 0.995x the base's time, else as the tree stands. AB=0 skips the A/B
# (FlashMLA alone, the tree as it stands).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
D=${DEADLINE_S:-460}  # the whole call, seconds
lim() { local l=$(( 170 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF"
b() { local d=$1 f=$2
  { cmake -S . -B $d $cfg -DCMAKE_CUDA_FLAGS="$f" > $d.log 2>&1 &&
    cmake --build $d -j8 --target test_sm90_gpu sm90_timing >> $d.log 2>&1; } ||
    { echo "$d failed"; grep -m8 -E "error|Error" $d.log; }; }
if [ "${AB:-1}" = 1 ]; then
el build
b build-base "" &
b build-sh "-DMLAV90_SMEM_SHARED=1" &
wait
el built
for n in sh base; do
  el racecheck $n
  MLAV_SM90_CASES=2 MLAV_TEST_FILTER=test_sm90_tma_tiles timeout $(lim 60) compute-sanitizer --tool racecheck \
    --error-exitcode 99 build-$n/tests/test_sm90_gpu > $OUT/racecheck-$n.log 2>&1
  echo "$n racecheck rc=$? ss runs: $(grep -c '^  ss ' $OUT/racecheck-$n.log) ok: $(grep '^  ss ' $OUT/racecheck-$n.log | grep -c ': ok')"
  grep -E "SUMMARY" $OUT/racecheck-$n.log | tail -1; grep "Race reported" $OUT/racecheck-$n.log | sed 's/(const mlav.*//' | sort | uniq -c | head -3
done
el test_sm90_gpu sh
MLAV_SM90_CASES=6 timeout $(lim 80) build-sh/tests/test_sm90_gpu > $OUT/test-sh.log 2>&1; echo "test_sm90_gpu sh rc=$?"
grep -E "seed|PASSED|FAILED|\[  ERROR" $OUT/test-sh.log | head -4
echo "ss runs: $(grep -c '^  ss ' $OUT/test-sh.log) ok: $(grep '^  ss ' $OUT/test-sh.log | grep -c ': ok')"
for r in 1 2; do for n in base sh; do
  el timing $n $r
  timeout $(lim 30) build-$n/tests/sm90_timing 15 > $OUT/timing-$n-$r.txt 2>&1; echo "rc=$? $(tail -1 $OUT/timing-$n-$r.txt)"
done; done
python3 - $OUT <<'PY' | tee $OUT/ab.txt
import sys, math, os
def rows(f):
    r = {}
    if not os.path.exists(f): return r
    for l in open(f):
        a = l.split('|')
        if len(a) > 2 and a[0].split() and a[0].split()[0].isdigit():
            try: r[' '.join(a[0].split())] = (float(a[1].split()[0]), float(a[1].split()[3]))
            except Exception: pass
    return r
d = sys.argv[1]
t = {(n, r): rows("%s/timing-%s-%d.txt" % (d, n, r)) for n in ("base", "sh") for r in (1, 2)}
ks = [k for k in t[("base", 1)] if all(k in v for v in t.values())]
print("sm90/64 column (us), the rule's kernel: MLAV90_SMEM_SHARED=1 / base, two rounds; legal column: sh / base")
for k in ks:
    print("%-26s base %8.1f sh %8.1f  %.3f %.3f | legal %.3f" % (k, t[("base", 1)][k][1], t[("sh", 1)][k][1],
          t[("sh", 1)][k][1] / t[("base", 1)][k][1], t[("sh", 2)][k][1] / t[("base", 2)][k][1], t[("sh", 1)][k][0] / t[("base", 1)][k][0]))
for r in (1, 2):
    g = [math.log(t[("sh", r)][k][1] / t[("base", r)][k][1]) for k in ks]
    print("round %d geomean sh / base: %.3f (%d points)" % (r, math.exp(sum(g) / len(g)), len(g)))
PY
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log timing-*.txt 2>/dev/null) && (cd $OUT && rm -f *.log timing-*.txt)
fi
flags=""
if [ "${AB:-1}" = 1 ] && grep -q "PASSED" <(tar -xzOf $OUT/logs.tgz test-sh.log) && ! grep -q "FAILED" <(tar -xzOf $OUT/logs.tgz test-sh.log) &&
   python3 -c "import re,sys; g=[float(x) for x in re.findall(r'geomean sh / base: ([0-9.]+)', open(sys.argv[1]).read())]; sys.exit(0 if g and max(g) < 0.995 else 1)" $OUT/ab.txt; then
  flags="-DMLAV90_SMEM_SHARED=1"
fi
left=$(( D - ($(date +%s) - t0) ))
el "flashmla, CUDAFLAGS='$flags', TOTAL_BUDGET=$left"
echo "$flags" > $OUT/flashmla-cudaflags.txt
CUDAFLAGS="$flags" COMMIT=${COMMIT:-unknown} FLASHMLA_PREBUILT_SPLITKV=1 \
  TOTAL_BUDGET=$left BENCH_ARGS="--variants=" OUT=$OUT/peer bash .peer/flashmla/run.sh . 2>&1 | tail -8
( cd $OUT/peer && tar czf ../peer-logs.tgz $(ls | grep -v -E '^(results.md|variants.md|results.jsonl|summary.txt)$') &&
  ls | grep -v -E '^(results.md|variants.md|results.jsonl|summary.txt)$' | xargs rm -rf )
el done
