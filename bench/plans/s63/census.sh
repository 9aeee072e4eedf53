#!/usr/bin/env bash
# Where the seesaw kernel's warpgroups wait, in cycles (a diagnostic; census.patch never lands):
# each warpgroup's warp 0 reads %clock around its waits (S's issue with its block waits, S's
# completion, each hand-over, each P V completion) and sums them over its pairs; the sums over all
# blocks and launches of one process are printed at its exit (CENSUS line: wg0 then wg1, 8 sums
# each: see census.patch's wg0.cuh and wg1.cuh for which wait is which, [6] the loop's cycles, [7]
# its pairs). One process a point, so each line is one point's. The clock reads fence ptxas's
# schedule (registers 214/240 against 234/254 unpatched, nvcc 13.0; no spills, no C7515), so the
# patched kernel's time is printed beside each census and compared with the unpatched one's, timed
# in the same call.
#   CAP=300 bash bench/plans/s63/census.sh       (carry .debs; ~200 s on an H100)
PATCH=../s63/census.patch
EXTRA_TARGETS="mlaverify_cli"
source bench/plans/s54/keys_steps.sh
POINTS=${POINTS:-"16 128 16 131072;16 64 9 32768;16 16 16 131072;16 64 2 131072;16 128 2 131072"}
census_point() { # $1 the build's CLI, then batch heads q_len prefix
  local m=$1; shift
  timeout $(lim 60) $m bench --backend cuda --batch $1 --heads $2 --qlen $3 --prefix $4 \
    --page-size 64 --reps 20 --max-seconds 2 2>&1
}
( cd /tmp/base && cmake -S . -B build-base -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF \
    -DMLAV_BUILD_EXAMPLES=OFF > $O/build-base.log 2>&1 \
  && cmake --build build-base -j16 --target mlaverify_cli >> $O/build-base.log 2>&1 )
echo "base build rc=$?"; el base-built
IFS=';' read -ra pts <<< "$POINTS"
for pt in "${pts[@]}"; do
  read -r b h q p <<< "$pt"
  for round in 1 2; do
    census_point /tmp/base/build-base/mlaverify $b $h $q $p > $O/base-$b-$h-$q-$p-$round.txt
    census_point $B/mlaverify $b $h $q $p > $O/census-$b-$h-$q-$p-$round.txt
  done
  echo "== B $b H $h q_len $q prefix $p"
  for round in 1 2; do
    for k in base census; do
      echo "$k $round: $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ ' $O/$k-$b-$h-$q-$p-$round.txt | head -1)"
    done
  done
  grep -h CENSUS $O/census-$b-$h-$q-$p-2.txt | awk '{
    n0 = $10; n1 = $19; if (n0 == 0 || n1 == 0) { print "no seesaw pairs"; next }
    printf "wg0 a pair (cycles): S issue %.0f, S done %.0f, M %.0f, P_A V_A done %.0f, PB %.0f,", $3/n0, $4/n0, $5/n0, $6/n0, $7/n0
    printf " P_B V_B done %.0f; loop %.0f; pairs %d\n", $8/n0, $9/n0, n0
    printf "wg1 a pair (cycles): S issue %.0f, S done %.0f, REF %.0f, PA %.0f, P_B V_B done %.0f,", $12/n1, $13/n1, $14/n1, $15/n1, $16/n1
    printf " P_A V_A done %.0f; loop %.0f; pairs %d\n", $17/n1, $18/n1, n1 }'
  el "$b $h $q $p"
done
