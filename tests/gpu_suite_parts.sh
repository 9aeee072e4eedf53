#!/usr/bin/env bash
# ctest test_gpu_suite_parts: bench/gpu-suite.sh's SUITE_PART table against the steps the suite
# runs. Every step it names (`step NAME` or `skip NAME` in the script) but the build's own (debs,
# configure, build: every part builds) belongs to exactly one part, and every name a part lists
# is such a step: a step in no part would run in every part's call, one in two parts twice, and
# a misspelt name would leave its step in every call.
#   gpu_suite_parts.sh SOURCE_DIR [SUITE_SCRIPT]
set -euo pipefail
suite=${2:-$1/bench/gpu-suite.sh}
# the steps: names after `step` or `skip` where a command starts (comments left out)
steps=$(sed 's/^[[:space:]]*#.*//; s/[[:space:]]#[[:space:]].*//' "$suite" |
  grep -oE '(^|[;&|]|then|else|do)[[:space:]]*(step|skip) [a-z][a-z0-9-]*' |
  awk '{print $NF}' | grep -vxE 'debs|configure|build' | sort -u)
# the parts: the lines `[part]="names"` of `declare -A parts=(...)`
table=$(sed -n '/^declare -A parts=(/,/)$/p' "$suite" | grep -oE '\[[a-z]+\]="[^"]*"')
if [ -z "$steps" ] || [ -z "$table" ]; then
  echo "FAIL: no steps or no parts table in $suite"
  exit 1
fi
listed=$(sed -E 's/^\[[a-z]+\]="([^"]*)"$/\1/' <<< "$table" | tr ' ' '\n' | grep . | sort)
fail=0
while read -r s; do
  n=$(grep -cx -- "$s" <<< "$listed" || true)
  [ "$n" = 1 ] || { echo "FAIL: step $s is in $n parts"; fail=1; }
done <<< "$steps"
while read -r s; do
  grep -qx -- "$s" <<< "$steps" || { echo "FAIL: a part lists $s, which is no step"; fail=1; }
done < <(sort -u <<< "$listed")
[ "$fail" = 0 ] || exit 1
echo "ok: $(wc -l <<< "$steps") steps, each in one of $(wc -l <<< "$table") parts"
