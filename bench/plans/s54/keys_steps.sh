# The steps of the kernel calls (keys_variant.sh, s55/keys_pages.sh; session 56's gathered.sh and
# staged.sh at `git show e6944ab:bench/plans/s54/`), sourced by them: PATCH
# (a file in bench/plans/s54/; none for keys_pages.sh) applied to the checkout and taken off at the
# end, main copied to /tmp/base and to /tmp/NAME for each NAME in EXTRA_TREES (before the patch),
# test_sm90_gpu (and EXTRA_TARGETS) built in build-s54 (incremental where an earlier call built it),
# then the functions below (ab_base: an A/B of /tmp/base against the tree). Each step is capped by
# what is left of CAP (570) s; everything lands in $OUT/o.tgz.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-570} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o; rm -rf $O; mkdir -p $O "$OUT" # OUT may name a folder under the tool's
trap 'tar -czf $OUT/o.tgz -C /tmp o; [ -f $O/patched ] && patch -R -p1 -s < bench/plans/s54/$PATCH' EXIT
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt 2>&1
copy_tree() { # $1: /tmp/$1 gets the checkout as it is now
  rm -rf /tmp/$1 && mkdir /tmp/$1
  tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/$1
}
if [ -n "${PATCH:-}" ]; then # no PATCH: the checkout as it is (bench/plans/s55/keys_pages.sh)
  for t in base ${EXTRA_TREES:-}; do copy_tree $t; done
  patch -p1 -s < bench/plans/s54/$PATCH || { echo "patch $PATCH failed"; exit 1; }
  touch $O/patched
fi
B=$PWD/build-s54
if [ -z "${NO_TEST_BUILD:-}" ]; then # an A/B-only call (NO_TEST_BUILD) builds no tests
  cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF \
    -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
    && cmake --build $B -j16 --target test_sm90_gpu ${EXTRA_TARGETS:-} >> $O/build.log 2>&1
  rc=$?; echo "build rc=$rc"; grep -E "spill|error" $O/build.log | head -5; el built
  [ $rc = 0 ] || exit 1
fi

keys_test() { # test_sm90_keys on the patched build; a failure ends the call
  timeout --kill-after=5 $(lim 120) env MLAV_TEST_FILTER=test_sm90_keys $B/tests/test_sm90_gpu > $O/keys.log 2>&1
  echo "keys rc=$? runs ok: $(grep -c '^  keys .*: ok' $O/keys.log)"; grep -E "FAIL|PASSED" $O/keys.log | head -3
  el keys
  grep -q "FAILED" $O/keys.log && { echo "keys failed: no A/B (the log says where)"; exit 1; }
}
ab() { # $1 base tree, $2 page size, $3 name, $4 batch (16): FP8, H {8, 16} x q_len {1, 2} x {32k,
  # 131k} at B 16, x {4k, 32k} at B 1
  mkdir -p $O/ab-$3
  local b=${4:-16} pre=32768,131072
  [ "$b" = 16 ] || pre=4096,32768
  OUT=$O/ab-$3 ROUNDS=3 timeout $(lim 150) bash bench/ab.sh $1 --backend cuda --batch $b \
    --heads 8,16 --qlen 1,2 --prefix $pre --kv-dtype fp8 --page-size $2 > $O/ab-$3.log 2>&1
  echo "ab $3 rc=$?"; tail -14 $O/ab-$3/ab.txt 2>/dev/null || tail -20 $O/ab-$3.log
  el ab-$3
}
ab_base() { # $1 name, then bench args: bench/ab.sh of /tmp/base against this tree, 3 rounds
  local n=$1; shift
  mkdir -p $O/ab-$n
  OUT=$O/ab-$n ROUNDS=3 timeout $(lim 200) bash bench/ab.sh /tmp/base --backend cuda "$@" \
    > $O/ab-$n.log 2>&1
  echo "ab $n rc=$?"; tail -24 $O/ab-$n/ab.txt 2>/dev/null || tail -20 $O/ab-$n.log
  el ab-$n
}
ncu_h16() { # the patched keys kernel at page_size 64, B 16, H 16, q_len 1, 131k
  local M; M=$(ls -d $PWD/build-ab-new*/mlaverify 2>/dev/null | head -1)
  if [ -x "$M" ]; then
    timeout $(lim 60) ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' --import-source no \
      -k regex:keys -c 1 -f -o /tmp/keys16 $M bench --backend cuda --batch 16 --heads 16 --qlen 1 \
      --prefix 131072 --kv-dtype fp8 --page-size 64 --reps 3 > $O/ncu-run-h16.log 2>&1
    echo "ncu rc=$?"
    ncu -i /tmp/keys16.ncu-rep --page details > $O/ncu-h16.txt 2>&1
    ncu -i /tmp/keys16.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $O/ncu-sass-h16.csv.gz
    grep -E "Duration|Warp Cycles Per Issued|excessive wavefronts" $O/ncu-h16.txt | head -4
  fi
  el ncu
}
sanitize_groups() { # compute-sanitizer tools ($1, a list) on test_sm90_gpu's groups (the rest), 2
  # cases a group, each into $O/san-TOOL-GROUP.log
  local t f
  for t in $1; do
    for f in "${@:2}"; do
      timeout --kill-after=5 $(lim 45) env MLAV_TEST_FILTER=$f MLAV_SM90_CASES=2 \
        compute-sanitizer --tool $t --error-exitcode 99 $B/tests/test_sm90_gpu \
        > $O/san-$t-$f.log 2>&1
      echo "$t $f rc=$?"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $O/san-$t-$f.log | sort | uniq -c
    done
  done
  el sanitizers
}
sanitize() { # compute-sanitizer tools ($@) on test_sm90_keys, 2 cases a group
  local tool
  for tool in "$@"; do
    timeout --kill-after=5 $(lim 45) env MLAV_TEST_FILTER=test_sm90_keys MLAV_SM90_CASES=2 \
      compute-sanitizer --tool $tool --error-exitcode 99 $B/tests/test_sm90_gpu > $O/san-$tool.log 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $O/san-$tool.log | sort | uniq -c
  done
  el sanitizers
}
sass_counts() { # the keys instances' SASS, base (/tmp/base) and patched: instructions by opcode
  local t
  for t in base new; do
    local src=/tmp/base; [ $t = base ] || src=$PWD
    (cd $src && timeout $(lim 90) nvcc -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -Iinclude \
      -Isrc -DMLAV_BUILDING_LIBRARY -DMLAV_WITH_CUDA -DMLAV_WITH_SM90 \
      -gencode arch=compute_90a,code=sm_90a -cubin src/cuda/sm90/instances_keys.cu \
      -o /tmp/keys-$t.cubin) && cuobjdump -sass /tmp/keys-$t.cubin > $O/sass-$t.txt &
  done
  wait
  python3 - $O/sass-base.txt $O/sass-new.txt <<'PY' | tee $O/sass-counts.txt
import collections, re, sys
def counts(path):
    fn, out = None, {}
    for line in open(path):
        m = re.search(r'Function : (\S+)', line)
        if m:
            fn = m.group(1); out[fn] = collections.Counter(); continue
        m = re.search(r'/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*)', line)
        if fn and m:
            op = m.group(2)
            out[fn]['all'] += 1
            out[fn][op.split('.')[0] if not op.startswith('IMAD.MOV') else 'IMAD.MOV'] += 1
    return out
a, b = counts(sys.argv[1]), counts(sys.argv[2])
for fn in a:
    if fn not in b: continue
    print(fn[:90])
    for op in ('all', 'IMAD.MOV', 'MOV', 'HMMA', 'MOVM', 'F2FP', 'LDS', 'STS'):
        print('  %-9s base %5d new %5d' % (op, a[fn][op], b[fn][op]))
PY
  el sass
}
