#!/usr/bin/env bash
# Session 61's two refactors of the sm_90a family (056f865: the seesaw kernel as a folder of
# stages; 95cbdb9: sm90/kernel.cuh split into block.cuh, mask.cuh, write_output.cuh and the
# producer kernel) judged in one call: test_sm90_gpu whole on this checkout, then `bench/ab.sh`
# of their parent's sources (this checkout with pre-split.patch applied: ac8bf20's src) against
# this checkout, 3 rounds, at points that take each sm_90a kernel (the seesaw and, at short single
# requests, the producer over BF16 at page_size 64 and 1; the keys kernel at 8 and 16 rows and the
# staged seesaw at 32 row tiles over an FP8 cache). Their PTX is byte-identical to the parent's
# (nvcc 13.0, compiled on the development machine), so every ratio is predicted 1.00 within the
# rounds' noise. pre-split.patch is `git diff 809805c ac8bf20 -- src`: a tree whose src has moved
# on since needs it made again.
#   CAP=450 bash bench/plans/s61/refactor_ab.sh        (carry .debs; ~400 s)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
O=/tmp/o && rm -rf $O && mkdir -p $O
trap 'tar -czf $OUT/o.tgz -C /tmp o' EXIT
lim() { # the least of $1 and what is left of CAP, at least 5
  local l=$(( ${CAP:-450} - ($(date +%s) - t0) ))
  [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l
}
el() { echo "[t=$(( $(date +%s) - t0 ))s] $1"; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/machine.txt 2>&1
rm -rf /tmp/pre && mkdir /tmp/pre
tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . \
  | tar -x -C /tmp/pre
(cd /tmp/pre && patch -p1 -s < bench/plans/s61/pre-split.patch) \
  || { echo "pre-split.patch failed"; exit 1; }
B=$PWD/build-s61
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
  && cmake --build $B -j16 --target test_sm90_gpu >> $O/build.log 2>&1
echo "build rc=$?"; el built
timeout --kill-after=5 $(lim 200) $B/tests/test_sm90_gpu > $O/sm90.log 2>&1
echo "test_sm90_gpu rc=$?"; grep -E "PASSED|FAILED" $O/sm90.log | head -3; el tests
grep -q "FAILED" $O/sm90.log && { echo "tests failed: no A/B"; exit 1; }
ab() { # $1 name, then bench args
  local n=$1; shift
  mkdir -p $O/ab-$n
  OUT=$O/ab-$n ROUNDS=3 timeout $(lim 150) bash bench/ab.sh /tmp/pre --backend cuda "$@" \
    > $O/ab-$n.log 2>&1
  echo "ab $n rc=$?"; tail -12 $O/ab-$n/ab.txt 2>/dev/null || tail -12 $O/ab-$n.log
  el ab-$n
}
ab b16 --batch 16 --heads 8,64 --qlen 1,16 --prefix 4096,131072 --page-size 64
ab b1 --batch 1 --heads 8,128 --qlen 1,16 --prefix 4096,131072 --page-size 64
ab page1 --batch 16 --heads 16 --qlen 1,9 --prefix 32768 --page-size 1
ab fp8 --kv-dtype fp8 --batch 16 --heads 8,16,128 --qlen 1,16 --prefix 131072 --page-size 64
el done
