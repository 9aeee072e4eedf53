#!/usr/bin/env bash
# ctest test_cli_conventions: the `mlaverify` command's conventions.
#   --opt=value and --opt value give the same result (bench --list, and gen's bundle byte for
#   byte); -V and --version print the version and the usage names them; a usage error is a
#   sentence naming the valid values and a pointer at --help, at most two lines (the help is not
#   reprinted), status 2; info --help says what info prints; bench --engine on a backend without
#   the engine path says so.
#   conventions.sh MLAVERIFY WORK_DIR
set -euo pipefail
mlav=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
# stderr less what a sanitizer's runtime adds (Archer's TSAN_OPTIONS advice under TSan)
runtime_noise() { grep -v '^Warning: please export TSAN_OPTIONS' || true; }

# usage_error EXPECTED_TEXT ARGS...: status 2, at most 2 lines on stderr, the text, a --help pointer
usage_error() {
  local want=$1 rc=0
  shift
  "$mlav" "$@" > out.txt 2> err-all.txt || rc=$?
  runtime_noise < err-all.txt > err.txt
  [ "$rc" -eq 2 ] || fail "mlaverify $*: status $rc, expected 2"
  [ "$(wc -l < err.txt)" -le 2 ] || { cat err.txt; fail "mlaverify $*: more than 2 lines on stderr"; }
  grep -qF -- "$want" err.txt || { cat err.txt; fail "mlaverify $*: no '$want' on stderr"; }
  grep -qF -- "--help" err.txt || { cat err.txt; fail "mlaverify $*: no pointer at --help"; }
  [ ! -s out.txt ] || fail "mlaverify $*: wrote to stdout"
  echo "ok: mlaverify $* -> $(head -n1 err.txt)"
}

echo "== --version, -V, the usage"
v=$("$mlav" --version)
[ "$("$mlav" -V)" = "$v" ] || fail "-V and --version differ"
echo "$v" | grep -Eqx 'mlaverify [0-9]+\.[0-9]+\.[0-9]+' || fail "--version printed '$v'"
"$mlav" --help | grep -q -- '-V | --version' || fail "the usage does not name -V / --version"
"$mlav" --help | grep -q -- '--opt=VALUE' || fail "the usage does not say --opt=VALUE works"
echo "ok: $v"

echo "== --opt=value and --opt value"
"$mlav" bench --heads 2,4 --qlen 1 --prefix 10,20 --batch 2 --list > sep.txt
"$mlav" bench --heads=2,4 --qlen=1 --prefix=10,20 --batch=2 --list > eq.txt
cmp sep.txt eq.txt || fail "bench --list differs between the two forms"
[ "$(grep -vc '^#' eq.txt)" -eq 4 ] || fail "bench --list: expected 4 points"
"$mlav" gen --seed 7 --heads 2 --req 3:40 --page-size 4 --vocab 16 sep.safetensors > /dev/null
"$mlav" gen --seed=7 --heads=2 --req=3:40 --page-size=4 --vocab=16 eq.safetensors > /dev/null
cmp sep.safetensors eq.safetensors || fail "gen's bundles differ between the two forms"
echo "ok: bench --list and gen's bundle are the same either way"

echo "== usage errors: short, the valid range, a pointer at --help"
usage_error "(1 to 4096)" gen --heads 0 x.safetensors
usage_error "(1 to 4096)" gen --heads=0 x.safetensors
usage_error "(1 to 1048576)" gen --page-size 0 x.safetensors
usage_error "(bf16, f16 or f32)" gen --dtype f8 x.safetensors
usage_error "no output file given" gen --heads 4
usage_error "unknown option --frobnicate" gen --frobnicate 1 x.safetensors
usage_error "out of range (1 to 4096)" bench --heads 0 --list
usage_error "out of range (1 to 4096)" bench --heads=0 --list
usage_error "unknown option '--frobnicate'" bench --frobnicate 1
usage_error "unknown preset 'fast'" bench --preset fast --list
usage_error "unknown option --frobnicate" check --frobnicate
usage_error "no bundles given" check
usage_error "takes no arguments" info extra
rc=0; "$mlav" frobnicate 2> err-all.txt || rc=$?
runtime_noise < err-all.txt > err.txt
[ "$rc" -eq 2 ] && [ "$(wc -l < err.txt)" -le 2 ] && grep -q -- '--help' err.txt \
  || fail "an unknown command: status $rc, $(cat err.txt)"
echo "ok: mlaverify frobnicate -> $(cat err.txt)"

echo "== info --help"
"$mlav" info --help > info.txt
grep -q 'backends compiled in' info.txt && grep -q 'AUTO picks' info.txt \
  || { cat info.txt; fail "info --help does not say what info prints"; }
echo "ok"

echo "== bench --engine on a backend without the engine path"
"$mlav" bench --backend reference --heads 1 --qlen 1 --prefix 8 --reps 1 --min-reps 1 \
  --engine 2 > engine.txt 2> engine-err.txt || { cat engine-err.txt; fail "bench --engine on reference"; }
grep -q 'on the cuda backend only; reference has none' engine-err.txt \
  || { cat engine-err.txt; fail "bench --engine on reference did not say so"; }
echo "ok: $(cat engine-err.txt)"
echo "test_cli_conventions: passed"
