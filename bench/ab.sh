#!/usr/bin/env bash
# A/B of two source trees on one GPU in one call: build the `mlaverify` command of a baseline tree
# and of this tree for the device's own architecture only (minutes less than the full build),
# then bench both on the same points in ROUNDS interleaved rounds (after an untimed run of the
# baseline: baseline then this tree, this tree then baseline, ...) and print each point's two
# times (the fastest of its rounds) side by side with their ratio, then each round's geomean
# ratio. Rounds, because the GPU's clock follows its power cap: one schedule of one tree ran
# 448-499 us across eight runs of a call (bench/README.md, "What is measured"), so a 1-2%
# difference is read only where the rounds agree.
#
#   bash bench/ab.sh BASE_SRC [bench args]   BASE_SRC: a source tree (e.g. `git archive` of the
#                                            baseline commit); bench args default to
#                                            "--preset reference"; env OUT (output folder), JOBS,
#                                            ROUNDS (2), NEW_ARGS (bench args for this tree only,
#                                            e.g. "--engine 1 --engine-csv F" that a baseline
#                                            lacks)
# Files: $OUT/ab.txt (the comparison), ab-base.csv and ab-new.csv in ${AB_CSV_DIR:-$OUT} (each
# point's least time_us over the rounds, its other columns the first round's; with --engine
# likewise the engine rows' times, run_over_exact recomputed); each round's CSVs, the build logs
# and the bench tables in build-ab-logs/.
# The device tool returns at most 8 files from $OUT and a suite run needs 7: in a call with both,
# set AB_CSV_DIR=build-ab-logs.
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
rounds=${ROUNDS:-2}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: ROUNDS must be a positive integer" >&2; exit 2; }
engine=0; [[ " ${args[*]} " == *" --engine "* ]] && engine=1
# One untimed run of the baseline first, and the order alternating by round: a call's first run,
# on a cool GPU, was the faster at the long points until the power cap held the clocks (B 16,
# H 128, q_len 4, 131k: 3,811 us, then 3,993-4,120 in every later run of either tree;
# docs/PERFORMANCE.md#hopper, "The power cap"), which a fixed order credits to one tree.
cli=build-ab-base-$tag/mlaverify; [ -x "$cli" ] || cli=build-ab-base-$tag/src/cli/mlaverify
"$cli" bench --backend cuda "${args[@]}" --csv "$logs/ab-warmup.csv" > "$logs/ab-warmup.txt" 2>&1 ||
  { cat "$logs/ab-warmup.txt"; exit 1; }
for r in $(seq 1 "$rounds"); do
  order="base new"; [ $((r % 2)) = 0 ] && order="new base"
  for side in $order; do
    dir=build-ab-new extra=(); [ $side = base ] && dir=build-ab-base-$tag
    # shellcheck disable=SC2206
    [ $side = new ] && extra=(${NEW_ARGS:-})
    # with --engine, each side's engine rows (plan for limits, graph replays) go to their own file
    [ $engine = 1 ] && extra+=(--engine-csv "$logs/ab-$side-engine-$r.csv")
    # the command is at the build folder's top; a baseline tree from before tools/ has it in
    # src/cli
    cli=$dir/mlaverify; [ -x "$cli" ] || cli=$dir/src/cli/mlaverify
    "$cli" bench --backend cuda "${args[@]}" "${extra[@]}" --csv "$logs/ab-$side-$r.csv" \
      > "$logs/ab-$side-$r.txt" 2>&1 || { cat "$logs/ab-$side-$r.txt"; exit 1; }
  done
done
# each point's fastest round: the header, then per point (the first `nkey` columns, and the
# kv_dtype column where the header has one) the first round's row with the columns `cols` each
# the least over the rounds, and `ratio` (a column = column / column, e.g. "12=10/8") recomputed
fastest() { # nkey cols ratio out in...
  local nkey=$1 cols=$2 ratio=$3 out=$4; shift 4
  awk -F, -v OFS=, -v nkey="$nkey" -v cols="$cols" -v ratio="$ratio" '
    BEGIN { nc = split(cols, c, " "); if (ratio != "") { split(ratio, q, "[=/]") } }
    FNR == 1 { if (NR == 1) { print; for (i = 1; i <= NF; i++) if ($i == "kv_dtype") kv = i }
               next }
    { k = $1; for (i = 2; i <= nkey; i++) k = k FS $i
      if (kv) k = k FS $kv
      if (!(k in row)) { row[k] = $0; order[++n] = k; next }
      m = split(row[k], f, FS)
      for (j = 1; j <= nc; j++) if ($(c[j]) + 0 < f[c[j]] + 0) f[c[j]] = $(c[j])
      line = f[1]; for (i = 2; i <= m; i++) line = line OFS f[i]; row[k] = line }
    END { for (i = 1; i <= n; i++) {
            if (ratio != "") { m = split(row[order[i]], f, FS)
              if (f[q[3]] + 0 > 0) f[q[1]] = sprintf("%.4f", f[q[2]] / f[q[3]])
              line = f[1]; for (j = 2; j <= m; j++) line = line OFS f[j]; row[order[i]] = line }
            print row[order[i]] } }' "$@" > "$out"
}
for side in base new; do
  files=(); for r in $(seq 1 "$rounds"); do files+=("$logs/ab-$side-$r.csv"); done
  # the CSV's point: backend,gpu,batch,heads,q_len,prefix,page_size,dtype (and kv_dtype); time_us
  # is column 9, the fastest and slowest replays (min_us, max_us) follow the ceilings' fractions
  fastest 8 "9" "" "$csvd/ab-$side.csv" "${files[@]}"
  if [ $engine = 1 ]; then
    files=(); for r in $(seq 1 "$rounds"); do files+=("$logs/ab-$side-engine-$r.csv"); done
    # batch,heads,q_len,prefix,page_size,dtype,capacity, then exact, step, run and update us, and
    # run_over_exact
    fastest 7 "8 9 10 11" "12=10/8" "$csvd/ab-$side-engine.csv" "${files[@]}"
  fi
done
{
  echo "A/B on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"
  echo "base: $base_src  new: $PWD  bench ${args[*]}"
  for side in base new; do   # the ceilings each bench measured (its table stays in build-ab-logs/)
    grep -h '^# ceilings' "$logs/ab-$side-1.txt" | sed "s/^# /# $side: /" || true
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
  for r in $(seq 0 "$rounds"); do   # 0: the fastest rounds' table above; then each round's own
    b=$csvd/ab-base.csv n=$csvd/ab-new.csv what="fastest of $rounds rounds"
    [ "$r" = 0 ] || { b=$logs/ab-base-$r.csv n=$logs/ab-new-$r.csv what="round $r"; }
    join -t, <(awk -F, "$key" "$b" | sort) <(awk -F, "$key" "$n" | sort) |
      awk -F'[|,]' -v what="$what" '$7 > 0 && $8 > 0 { s += log($8 / $7); c++ }
        END { if (c) printf "new/base geomean, %s: %.4f over %d points\n", what, exp(s / c), c }'
  done
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
