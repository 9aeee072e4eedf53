#!/usr/bin/env bash
# A/B of patch variants against the working tree, on one GPU in one call: for each patch in
# VARIANTS (paths, applied with -p1 to a copy of the working tree), bench/ab.sh of that copy
# against the working tree, ROUNDS (3) rounds, at B 16 over the harness's 40 shapes from 32k and
# at B 1 over its 20 131k shapes (BF16, page 64 shuffled, the L2 dirtied as the harness leaves
# it). Outputs: $OUT/<patch name>-b16.txt and -b1.txt (ab.sh's comparisons); with GOLDEN=1
# also -golden.txt: every golden bundle checked on `cuda` with the variant's build, the sm_90a
# family's seesaw kernel forced. B1=0 leaves out the B 1 points.
#   VARIANTS="bench/plans/s70/promo-128B.patch" bash bench/plans/s70/variants.sh   (carry .debs)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-$PWD/build-variants}; mkdir -p "$OUT"
source bench/plans/s54/peer_build.sh
peer_src   # the carried .debs installed, the working tree copied to /tmp/src-r: the base
base=/tmp/src-r
for patch in ${VARIANTS:?}; do
  name=$(basename "$patch" .patch) dir=/tmp/v-$name
  rm -rf "$dir" && cp -r "$base" "$dir"
  (cd "$dir" && patch -p1 -s < "$OLDPWD/$patch") || { echo "$name: does not apply"; continue; }
  common=(--page-size 64 --tree chain --l2 dirty --reps 15 --min-reps 5 --max-seconds 0.5)
  OUT=$dir/out-b16 ROUNDS=${ROUNDS:-3} bash "$dir/bench/ab.sh" "$base" --batch 16 \
    --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 32768,131072 "${common[@]}" \
    > "$OUT/$name-b16.txt" 2>&1
  if [ "${B1:-1}" = 1 ]; then
    OUT=$dir/out-b1 ROUNDS=${ROUNDS:-3} bash "$dir/bench/ab.sh" "$base" --batch 1 \
      --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 131072 "${common[@]}" \
      > "$OUT/$name-b1.txt" 2>&1
  fi
  tail -n 6 "$OUT/$name"-b*.txt
  if [ "${GOLDEN:-0}" = 1 ]; then
    MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw "$dir/build-ab-new/mlaverify" check \
      --backend cuda golden/*.safetensors > "$OUT/$name-golden.txt" 2>&1
    tail -n 3 "$OUT/$name-golden.txt"
  fi
done
