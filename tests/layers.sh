#!/usr/bin/env bash
# ctest test_layers: the library (src/, include/), the tools (tools/) and the lab (bench/) stay
# apart, as docs/DESIGN.md#layers says:
#   1. every quoted #include in src/ names a file of src/ or include/ (the library includes no
#      tool and no diagnostic);
#   2. every quoted #include in tools/ and bench/ names a file of its own tree, the public header
#      or the one internal header, src/internal/mlaverify_internal.h (no path into a backend, no
#      library source compiled into a tool), or for a diagnostic built with the tests, their
#      fixtures;
#   3. no macro that src/ tests (#ifdef, #ifndef, defined()) is defined in tools/ or bench/: the
#      library carries no hook for them;
#   4. the lab does not include the tools (the command links the benchmark program, not the
#      reverse).
#   layers.sh SOURCE_DIR
set -euo pipefail
root=$(cd "$1" && pwd)
cd "$root"
bad=0
fail() { echo "FAIL: $*"; bad=1; }

# resolve FILE INCLUDE: the path the include names, relative to the root, or "" when no file of
# the tree is meant (a system header in quotes, a header of the toolkit)
resolve() {
  local dir inc=$2 p
  dir=$(dirname "$1")
  for p in "$dir/$inc" "include/$inc" "src/internal/$inc" "tools/bundle/$inc" "tools/cli/$inc" \
           "bench/program/$inc" "bench/diag/$inc" "tests/$inc"; do
    if [ -f "$p" ]; then
      realpath -m --relative-to="$root" "$p"
      return
    fi
  done
  echo ""
}

includes() { # FILE: the quoted includes of FILE, one a line
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"
}

sources() { # DIR...: the C, C++ and CUDA files under DIR
  find "$@" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort
}

n=0
for f in $(sources src); do
  for inc in $(includes "$f"); do
    t=$(resolve "$f" "$inc")
    n=$((n + 1))
    case $t in
      "" | src/* | include/*) ;;
      *) fail "$f includes $inc ($t): the library includes no tool or diagnostic" ;;
    esac
  done
done
echo "1. src/: $n quoted includes, all inside the library"

n=0
for f in $(sources tools bench); do
  for inc in $(includes "$f"); do
    t=$(resolve "$f" "$inc")
    n=$((n + 1))
    case $t in
      src/internal/mlaverify_internal.h | include/mlaverify.h) ;;
      "")
        # a bare name that only an include folder into src/ would find
        [ -z "$(find src -name "$(basename "$inc")" -print -quit)" ] ||
          fail "$f includes $inc, a file of src/ found through an include folder" ;;
      src/*) fail "$f includes $inc ($t): tools and diagnostics reach the library through" \
                  "include/mlaverify.h and src/internal/mlaverify_internal.h only" ;;
      tools/*)
        case $f in bench/*) fail "$f includes $inc ($t): the lab does not include the tools" ;; esac ;;
      tests/test_util.h)
        [ "$f" = bench/diag/rescale_votes.c ] || fail "$f includes the tests' fixtures ($inc)" ;;
    esac
  done
done
echo "2, 4. tools/ and bench/: $n quoted includes, none into src/ but the two headers"

# 3: macros src/ tests, against macros tools/ and bench/ define
tested=$(sources src | xargs cat | grep -E '^[[:space:]]*#[[:space:]]*(if|ifdef|ifndef|elif)' |
  grep -oE '\b[A-Z_][A-Z0-9_]+\b' | grep -vE '^(if|ifdef|ifndef|elif|defined)$' | sort -u)
defined=$(sources tools bench | xargs cat |
  sed -n 's/^[[:space:]]*#[[:space:]]*define[[:space:]]\+\([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' | sort -u)
hooks=$(comm -12 <(echo "$tested") <(echo "$defined"))
if [ -n "$hooks" ]; then
  fail "macros that src/ tests and tools/ or bench/ define (hooks): $(echo $hooks)"
fi
echo "3. $(echo "$tested" | wc -w) macros tested in src/, none defined by the tools or the lab"

[ $bad -eq 0 ] && echo "ok: library, tools and lab apart"
exit $bad
