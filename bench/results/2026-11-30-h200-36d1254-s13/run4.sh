#!/usr/bin/env bash
# session 13, device call 4 (call 3 ran its A/B before the debs were installed: cJSON missing, no figures):
#  1. bench A/B, two rounds interleaved: head (36d1254's library) against sched (409bf7b: the plan
#     weighs up to 8 more waves), at batches whose modelled time changes and at controls;
#  (the suite of 409bf7b ran in call 3)
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
C=build-s13c4
tar -xJf $C/bins.tar.xz -C $C
mkdir -p /tmp/ab
pts=("15 64 9 4096,32768" "16 64 9 2048,8192,32768" "8 128 9 4096,16384" "5 64 33 16384"
     "24 16 9 16384" "12 64 4 16384" "20 64 2 32768" "1 64 9 16384,131072" "8 16 9 32768"
     "32 16 4 4096")
for r in 1 2; do for v in head sched; do
  i=0
  for p in "${pts[@]}"; do
    set -- $p; i=$((i + 1))
    $C/mlav-$v bench --backend cuda --batch $1 --heads $2 --qlen $3 --prefix $4 \
      --csv /tmp/ab/r$r-$v-p$i.csv > /dev/null 2>> /tmp/ab/err.txt
  done
done; echo "round $r done $SECONDS s" >> /tmp/ab/err.txt; done
tar -cJf $OUT/ab-sched-call4.tar.xz -C /tmp/ab .
cat /tmp/ab/err.txt | tail -3
