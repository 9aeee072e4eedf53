#!/usr/bin/env bash
# Which ptxas/nvcc options give the split kernel different machine code, and do any spill? Runs
# on any machine with nvcc (no GPU, no disassembler): compiles the BF16 family's instantiation
# file (src/cuda/flash/instantiations/bf16.cu) once per option set for one architecture, and
# prints per set the registers and spill bytes of each kernel instance and how much of the
# all-groups instance's code is identical, in order, to the product's build (the options
# src/cuda/CMakeLists.txt gives the instantiation files). Sets that share
# their code are grouped, so only distinct codes need device time (docs/PERFORMANCE.md#ptxas, session 12:
# the product's option was found this way, then timed with `mlaverify bench` per code).
#   bash bench/diag/ptxas_screen.sh [ARCH (90)] ["OPTIONS" ...]      env: OUT_DIR (build-exp/ptxas)
# Without option sets it screens ptxas's register usage levels 0-10, -O1, -O2, -dlcm=cg,
# -allow-expensive-optimizations=false and no option at all. Re-run it with each new toolkit:
# the register usage level is marked beta, and what a level produces may change.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-90}
shift || true
out=${OUT_DIR:-build-exp/ptxas}
mkdir -p "$out"
# the options the product gives the flash instantiations (src/cuda/CMakeLists.txt, when ptxas
# has them)
product=$(sed -n 's/.*COMPILE_OPTIONS "\([^"]*\)".*/\1/p' src/cuda/CMakeLists.txt)
if [ $# -gt 0 ]; then
  sets=("$@")
else
  sets=("" "-Xptxas=-O1" "-Xptxas=-O2" "-Xptxas=-dlcm=cg"
        "-Xptxas=-allow-expensive-optimizations=false")
  for l in 0 1 2 3 4 5 6 7 8 9 10; do sets+=("-Xptxas=--register-usage-level=$l"); done
fi
build() { # build NAME "OPTIONS": cubin and ptxas -v log
  # shellcheck disable=SC2086
  nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_"$arch" -Iinclude -Isrc/cuda -Isrc \
    -DMLAV_WITH_CUDA -cubin -Xptxas -v $2 -o "$out/$1.cubin" \
    src/cuda/flash/instantiations/bf16.cu > "$out/$1.log" 2>&1
}
build product "$product"
printf '%-48s %-22s %-10s %s\n' "options" "registers (8 kernels)" "spill B" \
  "BF16 all-groups code identical to the product's"
declare -A seen
for i in "${!sets[@]}"; do
  name=set$i
  if ! build "$name" "${sets[$i]}"; then
    printf '%-48s build failed (%s)\n' "${sets[$i]:-(none)}" "$out/$name.log"
    continue
  fi
  regs=$(grep -o 'Used [0-9]* registers' "$out/$name.log" | awk '{printf "%s ", $2}')
  spill=$(grep -o '[0-9]* bytes spill stores' "$out/$name.log" | awk '{s += $1} END {print s + 0}')
  same=$(python3 bench/diag/sass_identity.py "$out/product.cubin" "$out/$name.cubin" \
    featuresILb1ELb0ELb0E | tail -n1 | sed 's/; longest.*//')
  # the code of the family's instances, not the whole cubin (which records the options)
  code=$(python3 -c "import sys, hashlib; sys.path.insert(0, 'bench/diag'); import sass_identity as s
print(hashlib.sha256(b''.join(s.kernel_text(sys.argv[1], k) for k in
      ['featuresILb%dELb%dELb%dE' % (k & 1, k >> 1 & 1, k >> 2) for k in range(8)])).hexdigest()[:12])" \
      "$out/$name.cubin")
  group=${seen[$code]:-}
  [ -z "$group" ] && seen[$code]=${sets[$i]:-(none)}
  printf '%-48s %-22s %-10s %s%s\n' "${sets[$i]:-(none)}" "$regs" "$spill" "$same" \
    "${group:+  [same code as: $group]}"
done
