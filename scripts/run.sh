#!/usr/bin/env bash
# The main command: install missing build dependencies (Debian/Ubuntu, as root), build, then
# `mlaverify info` and `mlaverify check` of every golden bundle on the AUTO backend.
#   ./scripts/run.sh [BUILD_DIR]      env: as scripts/test.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
build=${1:-build}
if [ -n "$(mlav_missing_packages)" ] && command -v apt-get > /dev/null; then
  mlav_install_deps
fi
mlav_build "$build"
cli=$build/mlaverify
"$cli" info
shopt -s nullglob
bundles=("$mlav_root"/golden/*.safetensors)
if [ ${#bundles[@]} -eq 0 ]; then
  echo "run.sh: no golden bundles in $mlav_root/golden yet (golden/*.safetensors): nothing to check" >&2
  exit 1
fi
"$cli" check "${bundles[@]}"
