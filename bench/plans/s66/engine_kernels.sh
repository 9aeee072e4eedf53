#!/usr/bin/env bash
# Where the engine path's time past the exact plan goes at B 1, 4096 (docs/PERFORMANCE.md#hopper,
# Engine path: run / exact 1.11-1.18 at H 8, q_len 9 and 16, where the step's items fill the SMs
# and 264 blocks of the limits' grid run past them). `mlaverify bench --engine 1.0` times each point
# through the exact plan and through a plan for its limits (one CUDA graph, lengths read on the
# device); here Nsight Compute times each kernel of both alone (kernels serialized, graph nodes one
# by one): the step's scheduler, its split kernel on the limits' grid against the exact plan's, and
# the step combine against the exact combine. The split kernel's excess is then the blocks past the
# step, the combine's its own; what neither holds is the launches' overlap (programmatic launch)
# that serialized kernels lose. Points: B 1 at H {8, 64} x q_len {1, 9, 16} x 4096, and H 8,
# q_len 16 at 32k (1.04 at page_size 1 in session 66) as the control; PAGE the pool's page size
# (64; session 66's first run had the bench's default, 1). The legal family's kernel (q_len 1 at
# page_size 1) is matched by its name's start (ncu matches the base name).
# POINTS ("H q_len prefix;...") replaces the points, METRICS adds Nsight Compute metrics
# (dram__bytes_read.sum is printed beside the times).
#   CAP=240 bash bench/plans/s66/engine_kernels.sh      (carry .debs; ~75 s on an H100)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s); el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
lim() { local l=$(( ${CAP:-240} - ($(date +%s) - t0) )); [ $l -lt $1 ] || l=$1; [ $l -gt 5 ] || l=5; echo $l; }
O=/tmp/o-engine; rm -rf $O; mkdir -p $O
trap 'tar -czf $OUT/engine.tgz -C /tmp o-engine' EXIT
[ -d .debs ] && bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
B=$PWD/build-engine
cmake -S . -B $B -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DMLAV_NCCL=OFF -DMLAV_BUILD_EXAMPLES=OFF > $O/build.log 2>&1 \
  && cmake --build $B -j16 --target mlaverify_cli >> $O/build.log 2>&1
rc=$?; echo "build rc=$rc"; el built; [ $rc = 0 ] || { tail -20 $O/build.log; exit 1; }
IFS=';' read -ra pts <<< "${POINTS:-8 1 4096;8 9 4096;8 16 4096;64 1 4096;64 9 4096;64 16 4096;8 16 32768}"
for pt in "${pts[@]}"; do
  read -r h q p <<< "$pt"
  f=$O/h$h-q$q-p$p
  # the bench's own run / exact first (its timing, not ncu's), then the kernels under ncu
  timeout $(lim 30) $B/mlaverify bench --backend cuda --batch 1 --heads $h --qlen $q --prefix $p \
    --page-size ${PAGE:-64} --engine 1.0 --engine-csv $f-engine.csv > $f-bench.txt 2>&1
  timeout $(lim 60) ncu --clock-control none \
    --metrics gpu__time_duration.sum,launch__grid_size${METRICS:+,$METRICS} \
    -k regex:'flash_sm90|^verify_kernel|combine|step_schedule' --csv \
    $B/mlaverify bench --backend cuda --batch 1 --heads $h --qlen $q --prefix $p --engine 1.0 \
    --page-size ${PAGE:-64} --reps 3 --min-reps 3 > $f-ncu.csv 2> $f-ncu.err
  echo "== B 1, H $h, q_len $q, $p (ncu rc=$?)"; tail -2 $f-engine.csv
  python3 bench/plans/s66/engine_kernels.py $f-ncu.csv
done
el done
