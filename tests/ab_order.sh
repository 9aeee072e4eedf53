#!/usr/bin/env bash
# ctest test_ab_order: bench/ab.sh's timing order without a GPU. nvidia-smi and cmake are stubs
# whose `mlaverify bench` records which tree ran and writes a one-point CSV; the script must run
# the baseline once untimed, then alternate (base then new, new then base, ...: a fixed order
# credits one tree with the cool GPU of a call's first run), and table every round.
#   ab_order.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree/bench" "$work/base" "$work/bin"
cp "$src/bench/ab.sh" "$work/tree/bench/" # ab.sh works in its tree's root: a scratch one
cat > "$work/bin/nvidia-smi" <<'X'
#!/bin/sh
case "$*" in *compute_cap*) echo "9.0" ;; *) echo "stub GPU, 0.0" ;; esac
X
cat > "$work/bin/cmake" <<X
#!/bin/bash
# "cmake -S SRC -B DIR ...": DIR/mlaverify, a bench that logs DIR's name; "--build": nothing
[ "\$1" = "-S" ] || exit 0
mkdir -p "\$4"
cat > "\$4/mlaverify" <<'Y'
#!/bin/bash
csv=""; while [ \$# -gt 0 ]; do [ "\$1" = "--csv" ] && csv=\$2; shift; done
basename "\$(dirname "\$0")" >> "$work/order.log"
printf 'backend,gpu,batch,heads,q_len,prefix,page_size,dtype,time_us\ncuda,stub,1,8,1,4096,64,bf16,10\n' > "\$csv"
Y
chmod +x "\$4/mlaverify"
X
chmod +x "$work/bin/nvidia-smi" "$work/bin/cmake"
PATH="$work/bin:$PATH" ROUNDS=3 OUT="$work/out" bash "$work/tree/bench/ab.sh" "$work/base" \
  > "$work/ab.log" 2>&1 || { cat "$work/ab.log"; echo "FAIL: ab.sh exited non-zero"; exit 1; }
order=$(sed 's/build-ab-base-base/base/; s/build-ab-new/new/' "$work/order.log" | tr '\n' ' ')
want="base base new new base base new "
[ "$order" = "$want" ] || { echo "FAIL: order '$order', want '$want'"; exit 1; }
for r in 1 2 3; do
  grep -q "round $r: 1.0000 over 1 points" "$work/out/ab.txt" ||
    { cat "$work/out/ab.txt"; echo "FAIL: no table of round $r"; exit 1; }
done
echo "ok: $order"
