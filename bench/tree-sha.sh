#!/usr/bin/env bash
# A fingerprint of the sources a GPU run built, independent of git metadata (the device copy's
# .git can lag behind its files): sha256 over the sorted (path, sha256) list of every file under
# include/ src/ tests/ and the CMake files. Run it in a checkout of a commit to match a result:
#   git worktree add /tmp/c <commit> && bash bench/tree-sha.sh /tmp/c
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
find include src tests CMakeLists.txt cmake -type f 2>/dev/null \
  | grep -v -e '/__pycache__/' -e '\.pyc$' | LC_ALL=C sort | xargs sha256sum \
  | sha256sum | cut -c1-16
