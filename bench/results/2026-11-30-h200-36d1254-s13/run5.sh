#!/usr/bin/env bash
# session 13, device call 5: batches of mixed lengths (mlaverify bench --prefix-spread 0.5: each
# request's prefix drawn from prefix x [0.5, 1.5], the same draws in every run), two rounds
# interleaved: mw2 (1b38e41 with MLAV_FLASH_MORE_WAVES 2: the plan before 409bf7b) against mw8
# (1b38e41 as committed). Also the uniform batches at the same points, for the cost of mixing.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
C=build-s13c5
tar -xJf $C/bins.tar.xz -C $C
$C/mlav-mw8 info > $OUT/info-call5.txt 2>&1 || { cat $OUT/info-call5.txt; exit 1; }
mkdir -p /tmp/ab5
pts=("16 64 9 8192,32768" "8 128 9 16384" "16 128 4 16384" "32 64 4 16384" "12 64 9 16384"
     "24 16 9 16384" "32 16 4 4096" "48 16 9 8192")
for r in 1 2; do for v in mw2 mw8; do
  i=0
  for p in "${pts[@]}"; do
    set -- $p; i=$((i + 1))
    $C/mlav-$v bench --backend cuda --batch $1 --heads $2 --qlen $3 --prefix $4 \
      --prefix-spread 0.5 --csv /tmp/ab5/r$r-$v-p$i.csv > /tmp/ab5/r$r-$v-p$i.txt 2>> /tmp/ab5/err.txt
  done
done; echo "round $r done $SECONDS s" >> /tmp/ab5/err.txt; done
i=0
for p in "${pts[@]}"; do
  set -- $p; i=$((i + 1))
  $C/mlav-mw8 bench --backend cuda --batch $1 --heads $2 --qlen $3 --prefix $4 \
    --csv /tmp/ab5/uniform-mw8-p$i.csv > /tmp/ab5/uniform-mw8-p$i.txt 2>> /tmp/ab5/err.txt
done
tar -cJf $OUT/ab-spread-call5.tar.xz -C /tmp/ab5 .
tail -3 /tmp/ab5/err.txt
