#!/usr/bin/env bash
# A/B of two source trees on one GPU in one call: build the `mlaverify` command of a baseline tree
# and of this tree for the device's own architecture only (minutes less than the full build),
# then bench both on the same points (baseline first) and print the two times side by side with
# their ratio.
#
#   bash bench/ab.sh BASE_SRC [bench args]   BASE_SRC: a source tree (e.g. `git archive` of the
#                                            baseline commit); bench args default to
#                                            "--preset reference"; env OUT (output folder), JOBS,
#                                            NEW_ARGS (bench args for this tree only, e.g.
#                                            "--engine 1 --engine-csv F" that a baseline lacks)
# Files: $OUT/ab.txt (the comparison), ab-base.csv and ab-new.csv in ${AB_CSV_DIR:-$OUT}; build
# logs and the bench tables in build-ab-logs/. The device tool returns at most 8 files from $OUT
# and a suite run needs 7: in a call with both, set AB_CSV_DIR=build-ab-logs.
set -euo pipefail
cd "$(dirname "$0")/.."
base_src=$(cd "$1" && pwd); shift
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--preset reference)
OUT=${OUT:-$PWD/build-ab-out}
logs=$PWD/build-ab-logs
csvd=${AB_CSV_DIR:-$OUT}
mkdir -p "$OUT" "$logs" "$csvd"
export PATH=/usr/local/cuda/bin:$PATH
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d .)
tag=$(basename "$base_src")
for side in base new; do
  src=$PWD dir=build-ab-new
  [ $side = base ] && src=$base_src dir=build-ab-base-$tag
  cmake -S "$src" -B "$dir" -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch-real" -DMLAV_BUILD_TESTS=OFF > "$logs/ab-cmake-$side.log" 2>&1
  cmake --build "$dir" -j "${JOBS:-16}" --target mlaverify_cli >> "$logs/ab-cmake-$side.log" 2>&1 \
    || { tail -n 40 "$logs/ab-cmake-$side.log"; exit 1; }
done
for side in base new; do
  dir=build-ab-new extra=(); [ $side = base ] && dir=build-ab-base-$tag
  # shellcheck disable=SC2206
  [ $side = new ] && extra=(${NEW_ARGS:-})
  # with --engine, each side's engine rows (plan for limits, graph replays) go to their own file
  [[ " ${args[*]} " == *" --engine "* ]] && extra+=(--engine-csv "$csvd/ab-$side-engine.csv")
  # the command is at the build folder's top; a baseline tree from before tools/ has it in src/cli
  cli=$dir/mlaverify; [ -x "$cli" ] || cli=$dir/src/cli/mlaverify
  "$cli" bench --backend cuda "${args[@]}" "${extra[@]}" \
    --csv "$csvd/ab-$side.csv" > "$logs/ab-$side.txt" 2>&1 || { cat "$logs/ab-$side.txt"; exit 1; }
done
{
  echo "A/B on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"
  echo "base: $base_src  new: $PWD  bench ${args[*]}"
  for side in base new; do   # the ceilings each bench measured (its table stays in build-ab-logs/)
    grep -h '^# ceilings' "$logs/ab-$side.txt" | sed "s/^# /# $side: /" || true
  done
  printf '%6s %6s %6s %8s %5s %8s %12s %12s %7s\n' batch heads q_len prefix page kv base_us new_us \
    new/base
  # the key: batch, heads, q_len, prefix, page_size and the KV dtype (the kv_dtype column of a
  # --kv-dtype CSV, found by its header; the q dtype, column 8, in one without)
  key='NR==1 {for (i = 1; i <= NF; i++) if ($i == "kv_dtype") k = i}
       NR>1 && $1=="cuda" {print $3"|"$4"|"$5"|"$6"|"$7"|"(k ? $k : $8)","$9}'
  join -t, <(awk -F, "$key" "$csvd/ab-base.csv" | sort) <(awk -F, "$key" "$csvd/ab-new.csv" | sort) |
    awk -F'[|,]' '{printf "%6s %6s %6s %8s %5s %8s %12.1f %12.1f %7.3f\n", $1,$2,$3,$4,$5,$6,$7,$8,$8/$7}' |
    sort -k1,1n -k2,2n -k3,3n -k4,4n -k5,5n -k6,6
  if [ -f "$csvd/ab-new-engine.csv" ] && [ -f "$csvd/ab-base-engine.csv" ]; then
    # the engine path: step_us (update + run in one graph) and run_us (the run alone)
    echo "engine path (--engine): step_us and run_us, base and new"
    printf '%6s %6s %6s %8s %5s %8s %10s %10s %7s %10s %10s %7s\n' batch heads q_len prefix page kv \
      base_step new_step new/base base_run new_run new/base
    ekey='NR==1 {for (i = 1; i <= NF; i++) if ($i == "kv_dtype") k = i}
          NR>1 {print $1"|"$2"|"$3"|"$4"|"$5"|"(k ? $k : $6)","$9","$10}'
    join -t, <(awk -F, "$ekey" "$csvd/ab-base-engine.csv" | sort) \
      <(awk -F, "$ekey" "$csvd/ab-new-engine.csv" | sort) |
      awk -F'[|,]' '{printf "%6s %6s %6s %8s %5s %8s %10.1f %10.1f %7.3f %10.1f %10.1f %7.3f\n",
        $1,$2,$3,$4,$5,$6,$7,$9,$9/$7,$8,$10,$10/$8}' |
      sort -k1,1n -k2,2n -k3,3n -k4,4n -k5,5n -k6,6
  fi
} | tee "$OUT/ab.txt"
