#!/usr/bin/env bash
# ctest test_sass_check: bench/sass_check.sh without a GPU, against a stub cuobjdump that prints
# a dump of cubins as the real one does (each under its "arch = " line). Hopper's instructions in
# the sm_90a family's cubin pass; in an sm_90 cubin beside it, or with no sm_120 cubin, the check
# fails. (The check it replaced asked cuobjdump for -arch sm_90, which printed the sm_90a cubins
# too, and failed on the H200 for HGMMA that only the sm_90a family holds.)
#   sass_check.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
cat > "$work/bin/cuobjdump" <<'STUB'
#!/usr/bin/env bash
# -sass LIB: the fixture named by LIB; -res-usage: nothing
[ "$1" = -sass ] || exit 0
cat "$2"
STUB
chmod +x "$work/bin/cuobjdump"
cubin() { # arch, then SASS lines
  local a=$1; shift
  printf 'Fatbin elf code:\n================\narch = %s\ncode version = [1,8]\n\n\tcode for %s\n' "$a" "$a"
  printf '        /*0000*/                   %s ;\n' "$@"
}
{ cubin sm_90a 'HGMMA.64x64x16.F32 R152, gdesc[UR24], RZ, !UPT' 'UTMALDG.2D [UR8], [UR4]'
  cubin sm_90 'HMMA.16816.F32.BF16 R4, R8, R12, R4' 'LDGSTS.E.BYPASS.128 [R3], desc[UR6][R4.64]'
  cubin sm_120 'HMMA.16816.F32.BF16 R4, R8, R12, R4' 'LDSM.16.M88.4 R8, [R2]'
  cubin sm_90a 'HGMMA.64x64x16.F32 R152, gdesc[UR24], R152'; } > "$work/good"
{ cubin sm_90a 'HGMMA.64x64x16.F32 R152, gdesc[UR24], RZ, !UPT'
  cubin sm_90 'HMMA.16816.F32.BF16 R4, R8, R12, R4' 'HGMMA.64x64x16.F32 R152, gdesc[UR24], R152'
  cubin sm_120 'HMMA.16816.F32.BF16 R4, R8, R12, R4'; } > "$work/bad"
{ cubin sm_90 'HMMA.16816.F32.BF16 R4, R8, R12, R4'; } > "$work/no120"
run() { PATH="$work/bin:$PATH" bash "$src/bench/sass_check.sh" "$work/$1" > "$work/$1.log" 2>&1; }
run good || { cat "$work/good.log"; echo "FAIL: the sm_90a family's HGMMA failed the check"; exit 1; }
if ! grep -q '^sm_90a .*HGMMA *2 (the sm_90a family; not checked)' "$work/good.log" ||
  ! grep -q '^sm_90 .*forbidden .* 0$' "$work/good.log" ||
  ! grep -q '^cubins for: sm_120 sm_90 sm_90a$' "$work/good.log"; then
  cat "$work/good.log"; echo "FAIL: the good library's cubins not classed by their own arch"; exit 1
fi
if run bad; then cat "$work/bad.log"; echo "FAIL: HGMMA in an sm_90 cubin passed"; exit 1; fi
grep -q '^FAIL: sm_90 SASS contains' "$work/bad.log" || { cat "$work/bad.log"; echo "FAIL: no sentence for sm_90"; exit 1; }
if run no120; then cat "$work/no120.log"; echo "FAIL: a library without sm_120 passed"; exit 1; fi
grep -q '^FAIL: no sm_120 cubin' "$work/no120.log" || { cat "$work/no120.log"; echo "FAIL: no sentence for sm_120"; exit 1; }
echo "ok"
