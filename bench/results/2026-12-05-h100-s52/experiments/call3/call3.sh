#!/usr/bin/env bash
# Session 52 call 3, session 48's call 1 rebased (cluster-lock.patch on the keys kernel's launch; its `--l2 dirty`
# item moved to call 1). Main HEAD: (1) DRAM bytes of both libraries' split kernels at B 16, 131k with 2-3 row tiles a
# request (FlashMLA leads by 8-15%) and at 32k (it does not): does ours read KV once per row tile? (2) sustained
# clocks and power under each library alone at B 16, H 64, q_len 2, 131k; (3) cluster-lock.patch (a request's two
# row-tile blocks launched as a cluster of 2, kept within 2 pairs of tiles of each other by barrier.cluster)
# against HEAD in the harness.
set -uo pipefail
rm -rf /tmp/o
export PATH=/usr/local/cuda/bin:$PATH
R=$PWD
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( 440 - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
mk() {
  rm -rf /tmp/src-$1 && mkdir /tmp/src-$1 && tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . | tar -x -C /tmp/src-$1
  [ -z "${2:-}" ] || (cd /tmp/src-$1 && patch -p1 -s < $R/bench/plans/s52/$2) || { echo "patch $2 failed"; return 1; }
  cmake -S /tmp/src-$1 -B /tmp/b-$1 -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=OFF > /tmp/b-$1.log 2>&1 \
    && cmake --build /tmp/b-$1 -j5 --target $3 >> /tmp/b-$1.log 2>&1
  echo "build $1 rc=$?"
}
mk base "" "mlaverify mlaverify_cli" &
mk cl cluster-lock.patch mlaverify &
( FLASHMLA_PREBUILT_SPLITKV=1 MAX_JOBS=3 bash .peer/flashmla/build.sh /tmp/flashmla-build > /tmp/fbuild.log 2>&1; echo "flashmla build rc=$?" ) &
wait
el built
H() { # lib outdir args...
  local lib=$1 out=$2; shift 2
  MLAVERIFY_LIBRARY=/tmp/b-$lib/libmlaverify.so PYTHONPATH=/tmp/src-$lib/python PYTHONDONTWRITEBYTECODE=1 MLAV_COMMIT=head+$lib \
    python3 .peer/flashmla/bench_flashmla.py --out $out --variants= --copy-gib 0.25 --mm-n 1024 --ref-requests none \
    --flashmla-build /tmp/flashmla-build "$@"
}
mkdir -p $OUT/ncu
m=gpu__time_duration.sum,sm__cycles_elapsed.max,gpc__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_op_read.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,launch__grid_size
n=0
for pt in "base 16 64 2 131072" "base 16 8 16 131072" "base 16 64 2 32768" "cl 16 64 2 131072"; do
  read -r lib b h q p <<< "$pt"; n=$((n+1))
  MLAV_X_CLUSTER=1 timeout $(lim 50) ncu --clock-control none --metrics $m -k regex:'splitkv_mla|flash_sm90' -c 12 --csv \
    --log-file $OUT/ncu/p$n-$lib-$b-$h-$q-$p.csv bash -c "$(declare -f H); H $lib /tmp/ncu-$n --batch $b --heads $h --qlen $q --prefix $p --warmup-ms 1 --rep-ms 1 --order abba --budget 30" > /tmp/ncu-$n.log 2>&1
  echo "ncu $pt rc=$?"; tail -1 /tmp/ncu-$n.log | cut -c1-200
done
el ncu
tar -czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
ab() { # lib round
  local env=""; [ $1 = cl ] && env=1
  MLAV_X_CLUSTER=$env timeout $(lim 70) bash -c "$(declare -f H); H $1 /tmp/ab-$1-$2 --batch 16 --heads 8,64,128 --qlen 1,2,9,16 --prefix 131072 --order abba --budget 45 --rep-ms 60" > /tmp/ab-$1-$2.log 2>&1
  echo "ab $1 $2 rc=$?"
}
ab base 1; ab cl 1
mkdir -p /tmp/o && for d in /tmp/ab-*/ /tmp/pw-*/ /tmp/ncu-*/; do cp $d/results.jsonl /tmp/o/$(basename $d).results.jsonl 2>/dev/null; cp $d/summary.txt /tmp/o/$(basename $d).summary.txt 2>/dev/null; done
cp /tmp/ab-*.log /tmp/ncu-*.log /tmp/pw-*.log /tmp/o/ 2>/dev/null
el ab
tail -n 3 /tmp/b-*.log /tmp/fbuild.log > /tmp/o/builds.log
tar -czf $OUT/o.tgz -C /tmp o
el done
