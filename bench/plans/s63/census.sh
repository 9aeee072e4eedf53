#!/usr/bin/env bash
# Where the seesaw kernel's warpgroups spend a pair, in cycles (a diagnostic; its patches never
# land). census3.patch (the default, CENSUS_PATCH): every stretch of each warpgroup's pair timed by
# %clock laps (S's issue, inside it its block waits, S's completion, the softmax, each barrier,
# hand-over and P V completion, each refill's issue), summed by warps 0 and 1 of each warpgroup
# over their pairs, blocks and launches, printed at the process's exit (four CENSUS lines, 16 sums
# each; the awk below names them). Session 63's census.patch (waits alone) and census2.patch (warp
# 0 alone) are at `git show 9a3c3a0:bench/plans/s63/`. NO_BASE=1: no unpatched build and times.
# One process a point. The clock reads move ptxas's schedule (census2: registers 214/242 against
# 234/254 unpatched, nvcc 13.0; no spills, no C7515, as many injected arrives; census3 214/240),
# so the patched kernel's time is printed beside each census with the unpatched one's.
#   CAP=300 bash bench/plans/s63/census.sh       (carry .debs; ~110 s on an H100)
PATCH=../s63/${CENSUS_PATCH:-census3.patch}
EXTRA_TARGETS="mlaverify_cli"
source bench/plans/s54/keys_steps.sh
POINTS=${POINTS:-"16 128 16 131072;16 64 9 32768;16 16 16 131072;16 64 2 131072;16 64 16 32768"}
census_point() { # $1 the build's CLI, then batch heads q_len prefix
  local m=$1; shift
  timeout $(lim 60) $m bench --backend cuda --batch $1 --heads $2 --qlen $3 --prefix $4 \
    --page-size 64 --reps 20 --max-seconds 2 2>&1
}
[ -n "${NO_BASE:-}" ] || ( cd /tmp/base && cmake -S . -B build-base -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF \
    -DMLAV_BUILD_EXAMPLES=OFF > $O/build-base.log 2>&1 \
  && cmake --build build-base -j16 --target mlaverify_cli >> $O/build-base.log 2>&1 )
echo "base build rc=$?"; el base-built
IFS=';' read -ra pts <<< "$POINTS"
for pt in "${pts[@]}"; do
  read -r b h q p <<< "$pt"
  for round in 1 2; do
    [ -n "${NO_BASE:-}" ] ||
      census_point /tmp/base/build-base/mlaverify $b $h $q $p > $O/base-$b-$h-$q-$p-$round.txt
    census_point $B/mlaverify $b $h $q $p > $O/census-$b-$h-$q-$p-$round.txt
  done
  echo "== B $b H $h q_len $q prefix $p"
  for round in 1 2; do
    for k in base census; do
      [ $k = base ] && [ -n "${NO_BASE:-}" ] && continue
      echo "$k $round: $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ ' $O/$k-$b-$h-$q-$p-$round.txt | head -1)"
    done
  done
  grep -h CENSUS $O/census-$b-$h-$q-$p-2.txt | awk '
    BEGIN { split("blockwaits,S-issue,S-done,softmax,bar1,M,PAVA-done,PA-handover,refill0L,PB,PBVB,refill1LP", n0, ",")
            split("blockwaits,S-issue,S-done,scores,REF,PB-make,PA,PBVB-done,refill1R,PAVA-done,refill0RP", n1, ",") }
    { w = (substr($2, 1, 3) == "wg0") ? 0 : 1; np = $18; if (np == 0) { print $2 ": no pairs"; next }
      tot = 0; for (k = 1; k <= 11; k++) tot += $(k + 3)
      printf "%s a pair (cycles, %d pairs; loop %.0f):", $2, np, tot / np
      for (k = 0; k <= (w ? 10 : 11); k++) printf " %s %.0f", (w ? n1[k + 1] : n0[k + 1]), $(k + 3) / np
      printf "\n" }'
  el "$b $h $q $p"
done
