#!/usr/bin/env bash
# ctest test_ab_order: bench/ab.sh's timing order without a GPU. nvidia-smi and cmake are stubs
# (ab_stubs.sh) whose `mlaverify bench` records which tree ran and writes a one-point CSV; the
# script must run the baseline once untimed, then alternate (base then new, new then base, ...:
# a fixed order credits one tree with the cool GPU of a call's first run), and table every
# round.
#   ab_order.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree/bench" "$work/base"
cp "$src/bench/ab.sh" "$work/tree/bench/" # ab.sh works in its tree's root: a scratch one
. "$src/tests/ab_stubs.sh"
ab_stubs "$work/bin" "$work/order.log"
PATH="$work/bin:$PATH" ROUNDS=3 OUT="$work/out" bash "$work/tree/bench/ab.sh" "$work/base" \
  > "$work/ab.log" 2>&1 || { cat "$work/ab.log"; echo "FAIL: ab.sh exited non-zero"; exit 1; }
order=$(awk '{print $1}' "$work/order.log" | sed 's/build-ab-base-base/base/; s/build-ab-new/new/' | tr '\n' ' ')
want="base base new new base base new "
[ "$order" = "$want" ] || { echo "FAIL: order '$order', want '$want'"; exit 1; }
for r in 1 2 3; do
  grep -q "round $r: 1.0000 over 1 points" "$work/out/ab.txt" ||
    { cat "$work/out/ab.txt"; echo "FAIL: no table of round $r"; exit 1; }
done
echo "ok: $order"
