#!/usr/bin/env bash
# ctest test_ab_trees: bench/ab_trees.sh without a GPU, in a scratch checkout (a git repository
# holding the script, bench/diag/ab_table.py, a file `speed` and patches that change it).
# nvidia-smi and cmake are stubs (ab_stubs.sh): each tree's `mlaverify bench` logs which tree ran
# and times its point at 100 x the `speed` of the tree it was "built" from. The
# script must apply each tree's patches (reversed for -PATCH), run the first tree once untimed,
# rotate the order by round, run each config its rounds, and table each tree against the first.
#   ab_trees.sh SOURCE_DIR
set -euo pipefail
for tool in git python3; do
  command -v $tool > /dev/null || { echo "test_ab_trees skipped: no $tool"; exit 77; }
done
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
co=$work/checkout
mkdir -p "$co/bench/diag"
cp "$src/bench/ab_trees.sh" "$co/bench/"
cp "$src/bench/diag/ab_table.py" "$co/bench/diag/"
echo 1.0 > "$co/speed"
(cd "$co" && git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm base)
mkpatch() { # NAME SPEED: a patch that sets `speed`
  (cd "$co" && echo "$2" > speed && git diff > "$work/$1.patch" && git checkout -q speed)
  mv "$work/$1.patch" "$co/$1.patch"
}
mkpatch fast 0.9
echo 1.1 > "$co/speed" # the working tree's uncommitted change: reversed, the base is 1.0
(cd "$co" && git diff > "$work/wip.patch")
. "$src/tests/ab_stubs.sh"
ab_stubs "$work/bin" "$work/runs.log"
mv "$work/wip.patch" "$co/wip.patch"
(cd "$co" && PATH="$work/bin:$PATH" TMPDIR="$work" CONFIGS="p64:3 p1:1" TEST_TREES=f \
  TEST_TARGETS="test_a test_b" OUT="$work/out" \
  bash bench/ab_trees.sh b=-wip.patch f=-wip.patch,fast.patch w \
  > "$work/log" 2>&1) || { cat "$work/log"; echo "FAIL: ab_trees.sh exited non-zero"; exit 1; }
fail() { cat "$work/log"; echo "FAIL: $*"; exit 1; }
# trees: b (the uncommitted change reversed: speed 1.0), f (then fast.patch: 0.9), w (the working
# tree as it is: 1.1). The run order: the untimed first run, then round 1 b f w, round 2 f w b,
# round 3 w b f (each tree's p64 then, in round 1 only, p1; batches 1 and 16)
order=$(awk '{print $1}' "$work/runs.log" | sed 's/^build-//' | uniq | tr '\n' ' ')
want="b f w f w b w b f "   # uniq: the warm-up and round 1's first run are both b's
[ "$order" = "$want" ] || fail "order '$order', want '$want'"
[ "$(grep -c ' 1 1 bf16$' "$work/runs.log")" = 3 ] || fail "page 1 not run once a tree at B 1"
[ "$(grep -c ' 64 bf16$' "$work/runs.log")" = 19 ] || fail "page 64: not 3 trees x 3 rounds x 2 batches + 1"
grep -q "== p64: 2 points, f / b (min of the rounds) 0.9000" "$work/out/ab-f.txt" || fail "f's table: $(cat "$work/out/ab-f.txt")"
grep -q "== p64: 2 points, w / b (min of the rounds) 1.1000" "$work/out/ab-w.txt" || fail "w's table"
grep -q "round 3: 0.9000 over 2" "$work/out/ab-f.txt" || fail "f's round 3"
grep -q "== p1: 2 points, f / b (min of the rounds) 0.9000" "$work/out/ab-f.txt" || fail "f's page-1 table"
tar -tzf "$work/out/csv.tgz" > "$work/csv.list"
grep -q "csv/pg-w-p1-b16-1.csv" "$work/csv.list" || fail "csv.tgz lacks a CSV"
grep -q -- "-B build-f .*-DMLAV_BUILD_TESTS=ON" "$work/runs.log.cmake" || fail "f not configured with tests"
grep -q -- "-B build-b .*-DMLAV_BUILD_TESTS=OFF" "$work/runs.log.cmake" || fail "b configured with tests"
grep -q -- "--build build-f .*--target mlaverify_cli test_a test_b" "$work/runs.log.cmake" ||
  fail "f's test targets not built"
# the engine config: one run a round (the preset's own batches), tabled by run time and run / exact
(cd "$co" && PATH="$work/bin:$PATH" TMPDIR="$work" CONFIGS="eng:2" OUT="$work/out3" \
  bash bench/ab_trees.sh b=-wip.patch f=-wip.patch,fast.patch > "$work/log3" 2>&1) ||
  { cat "$work/log3"; fail "ab_trees.sh with eng exited non-zero"; }
[ "$(grep -c ' eng$' "$work/runs.log")" = 5 ] || fail "eng: not 2 trees x 2 rounds + 1 runs"
grep -q "== eng: 2 points, f / b (min of the rounds) 0.9000" "$work/out3/ab-f.txt" || fail "eng table: $(cat "$work/out3/ab-f.txt")"
grep -q "b run / exact 2.0000, 0 of 2 within 3%" "$work/out3/ab-f.txt" || fail "eng: b's run / exact"
grep -q "f run / exact 1.8000, 0 of 2 within 3%" "$work/out3/ab-f.txt" || fail "eng: f's run / exact"
# w16: B 16 alone; GOLDEN=1: each tree's build checked once, before the benches, with GOLDEN_ENV,
# a failing tree reported and still benched (x: the working tree with a file `bad`)
(cd "$co" && echo 1 > bad && git add -N bad && git diff -- bad > "$work/bad.patch" &&
  git reset -q bad && rm bad && mv "$work/bad.patch" .)
n0=$(wc -l < "$work/runs.log")
(cd "$co" && PATH="$work/bin:$PATH" TMPDIR="$work" CONFIGS="w16:2" GOLDEN=1 \
  GOLDEN_ENV="MLAV_STUB_ENV=seesaw" OUT="$work/out4" \
  bash bench/ab_trees.sh b=-wip.patch f=-wip.patch,fast.patch x=bad.patch > "$work/log4" 2>&1) ||
  { cat "$work/log4"; fail "ab_trees.sh with w16 and GOLDEN exited non-zero"; }
tail -n +$((n0 + 1)) "$work/runs.log" > "$work/runs4.log"
[ "$(head -n 3 "$work/runs4.log" | awk '{print $1, $2, $3}' | tr '\n' ' ')" = \
  "build-b check seesaw build-f check seesaw build-x check seesaw " ] ||
  fail "golden: not one check a tree before the benches: $(cat "$work/runs4.log")"
[ "$(grep -c ' 16 64 bf16$' "$work/runs4.log")" = 7 ] ||
  fail "w16: not the warm-up + 3 trees x 2 rounds at B 16: $(cat "$work/runs4.log")"
[ "$(wc -l < "$work/runs4.log")" = 10 ] || fail "w16: runs other than B 16"
grep -q "## b: rc 0 (MLAV_STUB_ENV=seesaw)" "$work/out4/golden.txt" || fail "golden.txt: b"
grep -q "## x: rc 1" "$work/out4/golden.txt" || fail "golden.txt: x's failure not reported"
grep -q "== w16: 1 points, f / b (min of the rounds) 0.9000" "$work/out4/ab-f.txt" ||
  fail "w16 table: $(cat "$work/out4/ab-f.txt")"
grep -q "== w16: 1 points, x / b (min of the rounds) 1.1000" "$work/out4/ab-x.txt" ||
  fail "x not benched after its failure: $(cat "$work/out4/ab-x.txt")"
# a patch that does not apply stops it before any build (tree b's too, listed first: a build
# left running past the exit wrote into this folder as the test removed it)
builds=$(wc -l < "$work/runs.log.cmake")
(cd "$co" && PATH="$work/bin:$PATH" TMPDIR="$work" OUT="$work/out2" bash bench/ab_trees.sh b x=fast.patch,fast.patch \
  > "$work/log2" 2>&1) && fail "a patch applied twice was accepted"
grep -q "does not apply to tree x" "$work/log2" || fail "no sentence for a patch that does not apply"
[ "$(wc -l < "$work/runs.log.cmake")" = "$builds" ] || fail "a build started before a patch failed"
echo "ok: $order"
