#!/usr/bin/env bash
# The sm_120-legal kernels' proof: LIB holds an sm_120 cubin, and no cubin but the sm_90a
# family's own (src/cuda/sm90, built for 90a only: wgmma and TMA are its point) holds an
# instruction sm_120 does not have (Hopper's HGMMA, TMA, bulk copies, wgmma's warp sync).
#   bash bench/sass_check.sh LIB        (cuobjdump on PATH; exit 0 when the proof holds)
# Each cubin is classed by the "arch = " line that cuobjdump prints above its code, in one dump
# of the whole library: `cuobjdump -sass -arch sm_90` also prints the sm_90a cubins, whose
# HGMMA the suite then charged to the legal family's sm_90 code (the H200 suite of 6de13a3).
set -uo pipefail
lib=${1:?usage: sass_check.sh LIB}
forbidden='HGMMA|UTMALDG|UTMASTG|UTMAPF|UTMACCTL|UBLKCP|WARPSYNC.*ALIGNED.*GMMA'
dir=$(mktemp -d -t sass-check.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cuobjdump -sass "$lib" > "$dir/all.txt" || { echo "FAIL: cuobjdump -sass $lib"; exit 1; }
awk -v d="$dir" '/^arch = / { a = $3 } a != "" { print > (d "/sass-" a ".txt") }' "$dir/all.txt"
archs=$(find "$dir" -name 'sass-*.txt' -printf '%f\n' | sed 's/^sass-//; s/\.txt$//' | sort)
echo "cubins for: $(tr '\n' ' ' <<< "$archs" | sed 's/ $//')"
echo "$archs" | grep -qx sm_120 || { echo "FAIL: no sm_120 cubin in $lib"; exit 1; }
bad=0
for a in $archs; do
  f=$dir/sass-$a.txt
  if [ "$a" = sm_90a ]; then
    printf '%-7s %7d SASS lines, HGMMA %5d (the sm_90a family; not checked)\n' "$a" \
      "$(wc -l < "$f")" "$(grep -c HGMMA "$f")"
    continue
  fi
  n=$(grep -cE "$forbidden" "$f")
  printf '%-7s %7d SASS lines, HMMA %5d, LDSM %5d, LDGSTS %5d, forbidden (%s) %d\n' "$a" \
    "$(wc -l < "$f")" "$(grep -c HMMA "$f")" "$(grep -c LDSM "$f")" "$(grep -c LDGSTS "$f")" \
    "$forbidden" "$n"
  if [ "$n" -ne 0 ]; then
    echo "FAIL: $a SASS contains instructions sm_120 does not have:"
    grep -nE "$forbidden" "$f" | head -n 20
    bad=1
  fi
done
echo "--- resource usage (sm_120): registers, static shared memory, spills"
cuobjdump -res-usage -arch sm_120 "$lib" | grep -E 'Function|REG|SHARED' | head -n 60
exit $bad
