#!/usr/bin/env bash
# A/B of several variants of this checkout in one device call, at the FlashMLA harness's 120
# shapes (B {1, 16} x H {8, 16, 64, 128} x q_len {1, 2, 4, 9, 16} x prefix {4k, 32k, 131k}): each
# tree is the checkout (tracked files and untracked ones git does not ignore) with zero or more
# patches applied, built for the device's architecture; the trees are benched in rounds whose
# order rotates (round 1 a b c, round 2 b c a, ...: a call's first run, on a cool GPU, was the
# faster at the long points, docs/PERFORMANCE.md#hopper, "The power cap"), after one untimed run of
# the first tree, and each point's least time over its rounds is compared with the first
# tree's (bench/diag/ab_table.py). bench/ab.sh is the two-tree form for any base tree and bench
# arguments; this one is the sessions' per-call scripts made one tool.
#
#   bash bench/ab_trees.sh NAME[=PATCH[,PATCH...]] ...
#     NAME: a word of letters, digits and _; the first tree is the base. PATCH: a path from the
#     checkout's root, applied with `git apply` in order; -PATCH applies it reversed (a base
#     without the working tree's uncommitted change: b=-change.patch).
#   env: OUT (output folder; the device tool sets it), CONFIGS (config:rounds, default
#     "p64:3 p1:3 fp8:2 tree:2"; p64 chains at page_size 64 with shuffled pages, p1 at
#     page_size 1 with shuffled rows, fp8 an E4M3 cache at page 64, tree random trees at q_len
#     4, 9, 16; w16 the page-64 chains at B 16 alone from 32k, the seesaw kernel's ground and
#     where FlashMLA leads, 40 shapes; eng the production preset through the engine path at
#     limits 1.0, one run a round, its --engine-csv tabled by run time and run / exact), GOLDEN
#     (1: each tree's build checks every golden bundle on `cuda` first, with GOLDEN_ENV's
#     variables, e.g. "MLAV_FLASH_FAMILY=sm90 MLAV_SM90_KERNEL=seesaw", into $OUT/golden.txt; a
#     tree that fails is reported and still benched), JOBS (build jobs in all, 16),
#     TEST_TREES (names whose build also makes TEST_TARGETS, with tests on), TEST_TARGETS,
#     BUDGET (seconds for the whole script, 570: no bench starts past it). A carried .debs is
#     installed first where its packages are missing (carry=[".debs"]).
# Files: $OUT/ab-NAME.txt for each tree but the first (ab_table.py's table against it),
# $OUT/golden.txt with GOLDEN=1, $OUT/csv.tgz (every round's CSVs, pg-NAME-CFG-bB-ROUND.csv);
# the builds in build-NAME/ (tests under build-NAME/tests/ for TEST_TREES, their sources in a
# mktemp folder the log names) and the logs in build-ab-trees/.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
t0=$(date +%s)
budget=${BUDGET:-570}
OUT=${OUT:-$root/build-ab-trees/out}
logs=$root/build-ab-trees
csvd=$logs/csv
mkdir -p "$OUT" "$csvd"
export PATH=/usr/local/cuda/bin:$PATH
say() { echo "[ab_trees t=$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $(( budget - ($(date +%s) - t0) )); }
[ $# -ge 2 ] || { echo "ab_trees.sh: name at least two trees (the first is the base)" >&2; exit 2; }

names=() patches=()
for spec in "$@"; do
  name=${spec%%=*} p=""; [ "$spec" = "$name" ] || p=${spec#*=}
  [[ $name =~ ^[A-Za-z0-9_]+$ ]] || { echo "ab_trees.sh: bad tree name '$name'" >&2; exit 2; }
  for n in "${names[@]}"; do [ "$n" != "$name" ] || { echo "ab_trees.sh: tree '$name' twice" >&2; exit 2; }; done
  names+=("$name") patches+=("$p")
done
cfgs=() rounds=() maxr=0
for c in ${CONFIGS:-p64:3 p1:3 fp8:2 tree:2}; do
  cfg=${c%%:*} r=${c#*:}
  case $cfg in p64|p1|fp8|tree|w16|eng) ;; *) echo "ab_trees.sh: unknown config '$cfg' (p64, p1, fp8, tree, w16, eng)" >&2; exit 2 ;; esac
  [[ $r =~ ^[1-9][0-9]*$ ]] || { echo "ab_trees.sh: config '$c' wants rounds (p64:3)" >&2; exit 2; }
  cfgs+=("$cfg") rounds+=("$r"); [ "$r" -le "$maxr" ] || maxr=$r
done

# the carried debs (OpenBLAS, cmocka, cJSON), as bench/gpu-suite.sh installs them
if ! pkg-config --exists cmocka libcjson openblas 2>/dev/null && [ -d .debs ]; then
  bash .debs/offline-debs.sh install .debs > "$logs/debs.log" 2>&1 || say "debs: see $logs/debs.log"
fi
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d .)
# the trees' sources outside any repository (`git apply` inside one would apply only the paths
# under its working directory), kept for ctest in a TEST_TREES build
srcs=$(mktemp -d -t ab-trees.XXXXXX)
say "sources in $srcs"
n=${#names[@]}
jobs=$(( ${JOBS:-16} / n )); [ $jobs -ge 1 ] || jobs=1
# every tree's sources first, so that a patch that does not apply stops the script before any
# build runs (a build started in the background would outlive the exit)
for i in "${!names[@]}"; do
  name=${names[$i]} src=$srcs/${names[$i]}
  mkdir -p "$src"
  git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$src"
  IFS=, read -r -a plist <<< "${patches[$i]}"
  for p in "${plist[@]}"; do
    rev=(); [ "${p#-}" = "$p" ] || { rev=(-R); p=${p#-}; }
    (cd "$src" && git apply "${rev[@]}" "$root/$p") ||
      { echo "ab_trees.sh: $p does not apply to tree $name" >&2; exit 1; }
  done
done
pids=()
for i in "${!names[@]}"; do
  name=${names[$i]} src=$srcs/${names[$i]}
  tests=OFF targets=(mlaverify_cli)
  # shellcheck disable=SC2206 # TEST_TARGETS is a list of words
  [[ " ${TEST_TREES:-} " == *" $name "* ]] && { tests=ON; targets+=(${TEST_TARGETS:-}); }
  rm -rf "build-$name" # a build of another source folder (an earlier call's) would not configure
  ( cmake -S "$src" -B "build-$name" -DMLAV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="$arch-real" -DMLAV_NCCL=OFF -DMLAV_BUILD_BENCH=OFF \
      -DMLAV_BUILD_EXAMPLES=OFF -DMLAV_BUILD_TESTS=$tests > "$logs/build-$name.log" 2>&1 &&
    cmake --build "build-$name" -j "$jobs" --target "${targets[@]}" >> "$logs/build-$name.log" 2>&1 ) &
  pids+=($!)
done
# every build waited for before any failure is reported, so that none outlives the exit
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("$i")
done
for i in "${failed[@]}"; do
  tail -n 30 "$logs/build-${names[$i]}.log"
  echo "ab_trees.sh: tree ${names[$i]} did not build" >&2
done
[ ${#failed[@]} = 0 ] || exit 1
say "built ${names[*]}"

grid="--heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 4096,32768,131072"
args_of() { # the bench arguments of a config
  case $1 in
    p64) echo "--tree chain --page-size 64 $grid" ;;
    p1) echo "--tree chain --page-size 1 $grid" ;;
    fp8) echo "--tree chain --page-size 64 --kv-dtype fp8 $grid" ;;
    tree) echo "--tree tree --page-size 64 --heads 8,16,64,128 --qlen 4,9,16 --prefix 4096,32768,131072" ;;
    w16) echo "--tree chain --page-size 64 --heads 8,16,64,128 --qlen 1,2,4,9,16 --prefix 32768,131072" ;;
    eng) echo "--preset production --engine 1.0" ;;
  esac
}
bench() { # tree cfg batch csv (eng: the preset's own batches, the engine rows into csv)
  local l out=(--batch "$3" --csv "$4"); l=$(left)
  [ "$l" -gt 5 ] || { say "no time left: $1 $2 B $3 not run"; return; }
  [ "$2" = eng ] && out=(--engine-csv "$4")
  # shellcheck disable=SC2046
  timeout "$l" "build-$1/mlaverify" bench --backend cuda --reps 15 --min-reps 5 --max-seconds 0.5 \
    $(args_of "$2") "${out[@]}" >> "$logs/bench-$1.log" 2>&1 ||
    say "bench rc=$? for $1 $2 B $3"
}
batches_of() { # the batches a config runs its points at (eng: one run, its preset's batches)
  case $1 in eng) echo 0 ;; w16) echo 16 ;; *) echo 1 16 ;; esac
}
if [ "${GOLDEN:-0}" = 1 ]; then # every tree's build on the golden bundles, before any bench
  : > "$OUT/golden.txt"
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086 # GOLDEN_ENV is a list of NAME=VALUE words
    env ${GOLDEN_ENV:-} "build-$name/mlaverify" check --backend cuda golden/*.safetensors \
      > "$logs/golden-$name.log" 2>&1
    rc=$?
    { echo "## $name: rc $rc (${GOLDEN_ENV:-no variables})"; tail -n 3 "$logs/golden-$name.log"; } \
      >> "$OUT/golden.txt"
    say "golden $name rc=$rc"
  done
fi
bench "${names[0]}" "${cfgs[0]}" 16 "$logs/warmup.csv"   # untimed (eng: its preset's batches)
for r in $(seq 1 "$maxr"); do
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${names[$(( (i + r - 1) % n ))]}"); done
  for name in "${order[@]}"; do
    for j in "${!cfgs[@]}"; do
      [ "$r" -le "${rounds[$j]}" ] || continue
      for b in $(batches_of "${cfgs[$j]}"); do
        bench "$name" "${cfgs[$j]}" "$b" "$csvd/pg-$name-${cfgs[$j]}-b$b-$r.csv"
      done
    done
  done
  say "round $r: ${order[*]}"
done
tar -czf "$OUT/csv.tgz" -C "$logs" csv
for name in "${names[@]:1}"; do
  python3 bench/diag/ab_table.py --dir "$csvd" --base "${names[0]}" --new "$name" \
    "${cfgs[@]}" > "$OUT/ab-$name.txt" 2>&1
  echo "######## $name against ${names[0]}"
  grep -E "^==|^   (B |H|round|[A-Za-z0-9_]+ run / exact)" "$OUT/ab-$name.txt"
done
say "done"
