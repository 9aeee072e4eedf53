#!/usr/bin/env bash
# Session 35, call 2 (from the checkout's root, .debs carried): does the block that holds a
# request's end cost more than its tiles, and is it the tree mask's lookups? B 1, q_len 16, page
# 64, prefixes whose last split is shorter than, or as long as, the others (README). Trees, each
# a copy of this checkout (f: the mask words loaded up front, mask-words.patch; b: main, f with
# that patch reversed), built side by side:
#   d  b + dbg-blocktime.patch (prints each block's cycles for one launch)
#   s  b + nosan.patch (no V sanitizing of hidden tiles);  m  b + nomask.patch (no mask lookups)
# d, s and m are measurements only (s and m wrong for non-finite V or hidden draft keys).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
R=bench/results/2026-12-03-h200-s35
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
cfg="-DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF"
el build
for v in f b d s m; do
  rm -rf /tmp/src-$v && mkdir /tmp/src-$v && git ls-files -z | xargs -0 cp --parents -t /tmp/src-$v
  [ $v != f ] && { (cd /tmp/src-$v && git apply -R "$OLDPWD/$R/mask-words.patch") || echo "reverse $v failed"; }
  case $v in d) pf=dbg-blocktime;; s) pf=nosan;; m) pf=nomask;; *) pf=;; esac
  [ -n "$pf" ] && { (cd /tmp/src-$v && git apply "$OLDPWD/$R/$pf.patch") || echo "patch $pf failed"; }
  tg=mlaverify_cli; tests=-DMLAV_BUILD_TESTS=OFF
  [ $v = f ] && { tg="mlaverify_cli test_sm90_gpu test_golden test_tree"; tests=-DMLAV_BUILD_TESTS=ON; }
  ( cmake -S /tmp/src-$v -B build-$v $cfg $tests > build-$v.log 2>&1 &&
    cmake --build build-$v -j4 --target $tg >> build-$v.log 2>&1 || echo "build-$v failed" ) &
done
wait
el built
MLAV_SM90_CASES=6 timeout 120 build-f/tests/test_sm90_gpu > f-sm90.log 2>&1; echo "f test_sm90_gpu rc=$? $(grep -cE ' ok ' f-sm90.log) ok, $(grep -E 'PASSED|FAILED' f-sm90.log | tr '\n' ' ')"
(cd build-f && timeout 100 ctest -R "^(test_golden|test_golden_sm90|test_golden_seesaw|test_tree)$" > ../f-ctest.log 2>&1; echo "f ctest rc=$?"; grep -E "tests passed|Failed" ../f-ctest.log)
el tested
P=4080,4144,4208,4272,4336,4400,4464,4528,4592,4656
bb() { "$@" --backend cuda --batch 1 --qlen 16 --page-size 64 --reps 30 --min-reps 10; }
for r in 1 2; do
  for v in b f s m; do
    bb build-$v/mlaverify bench --heads 64 --prefix $P --csv $OUT/h64-$v-$r.csv > /dev/null 2>&1
  done
  for v in b f; do
    MLAV_SM90_KERNEL=producer bb build-$v/mlaverify bench --heads 64 --prefix $P --csv $OUT/h64p-$v-$r.csv > /dev/null 2>&1
    bb build-$v/mlaverify bench --heads 128 --prefix $P --csv $OUT/h128-$v-$r.csv > /dev/null 2>&1
  done
done
el timed
for f in $OUT/h64-*-1.csv $OUT/h64p-*-1.csv $OUT/h128-*-1.csv; do echo "$(basename $f): $(tail -n +2 $f | cut -d, -f4,9 | tr '\n' ' ')"; done
for hp in 64:4080 64:4528 64:4592 128:4464 128:4592; do
  bb build-d/mlaverify bench --heads ${hp%%:*} --prefix ${hp##*:} > dbg-${hp%%:*}-${hp##*:}.log 2>&1
done
grep -c DBG dbg-*.log
mkdir -p csv && mv $OUT/*.csv csv/
tar -czf $OUT/csv.tgz csv
tar -czf $OUT/logs.tgz dbg-*.log build-*.log f-*.log
el done
