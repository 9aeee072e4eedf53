#!/usr/bin/env bash
# Nsight Compute sections of the flash kernels at a few bench points, on the GPU host:
#   bash bench/ncu.sh "64 33 16384" "64 1 131072" ...     (heads q_len prefix per point)
# env: OUT (output folder), BUILD_DIR (build-ncu), SECTIONS (default below), BATCH (requests a
# point, default 1), L2 (the bench's --l2 mode, e.g. dirty; ncu's own cache control is then off, so
# that the kernels meet the L2 the bench's flush leaves), DETAILS=1 (ncu's
# --print-details all: stall reasons, instruction mix), SASS=1 (opcode histogram of the BF16 flash
# kernel from cuobjdump into $OUT/sass-hist.txt), SOURCE=1 (for the first point, the BF16 flash
# kernel's per-SASS-instruction warp-stall samples into $OUT/ncu-source.csv). Builds only the CLI.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build-ncu-out}
build=${BUILD_DIR:-$PWD/build-ncu}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
[ -d .debs ] && bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
blog=$OUT/ncu-build.log
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMLAV_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-real > "$blog" 2>&1 \
  && cmake --build "$build" -j 16 --target mlaverify_cli >> "$blog" 2>&1 \
  || { tail -30 "$blog"; exit 1; }
default_sections="SpeedOfLight WarpStateStats ComputeWorkloadAnalysis"
default_sections+=" MemoryWorkloadAnalysis_Tables SchedulerStats Occupancy LaunchStats"
default_sections+=" InstructionStats"
sections=${SECTIONS:-$default_sections}
args=()
for s in $sections; do args+=(--section "$s"); done
[ -n "${DETAILS:-}" ] && args+=(--print-details all)
bargs=(--batch "${BATCH:-1}")
if [ -n "${L2:-}" ]; then args+=(--cache-control none); bargs+=(--l2 "$L2"); fi
kernels='flash_verify|flash_sm90|combine' # the legal family's, the sm_90a family's, the combines
if [ -n "${SASS:-}" ]; then
  pick='/Function : .*flash_verify_kernel.*bfloat16/{f=1;print;next} /Function :/{f=0} f'
  cuobjdump -sass "$build/mlaverify" | awk "$pick" > "$OUT/sass-flash-bf16.txt"
  grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z][A-Z0-9_.]*' "$OUT/sass-flash-bf16.txt" \
    | awk '{print $NF}' | sort | uniq -c | sort -rn > "$OUT/sass-hist.txt"
fi
for pt in "$@"; do
  read -r h q p <<< "$pt"
  echo "##### batch ${BATCH:-1} heads $h q_len $q prefix $p${L2:+ l2 $L2}"
  ncu --clock-control none "${args[@]}" -k regex:"$kernels" --launch-skip 4 -c 2 \
    "$build/mlaverify" bench --backend cuda "${bargs[@]}" --heads "$h" --qlen "$q" --prefix "$p" \
    --reps 10 --min-reps 10 2>&1 | grep -v '^==PROF==' 
done | tee "$OUT/ncu.txt"

if [ -n "${SOURCE:-}" ] && [ $# -gt 0 ]; then
  read -r h q p <<< "$1"
  ncu --clock-control none --section SourceCounters --section WarpStateStats \
    -k regex:'flash_verify|flash_sm90' --launch-skip 4 -c 1 -f -o "$OUT/ncu-source" \
    "$build/mlaverify" bench --backend cuda "${bargs[@]}" --heads "$h" --qlen "$q" --prefix "$p" \
    --reps 10 --min-reps 10 > /dev/null 2>&1
  ncu -i "$OUT/ncu-source.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu-source.csv" 2>&1 \
    && rm -f "$OUT/ncu-source.ncu-rep"   # kept when the CLI cannot print the source page
  echo "source view: $(wc -l < "$OUT/ncu-source.csv") lines in ncu-source.csv"
fi
