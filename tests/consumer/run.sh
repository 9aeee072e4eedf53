#!/usr/bin/env bash
# ctest test_install_consumer: install the build into a scratch prefix, then build and run the
# consumer in this folder against it four ways: find_package shared and static, pkg-config
# shared and static. A static binary must not need libmlaverify.so at run time.
#   run.sh CMAKE BUILD_DIR WORK_DIR C_COMPILER [EXTRA_C_FLAGS]
set -euo pipefail
cmake=$1 build=$2 work=$3 cc=$4 extra=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
prefix=$work/prefix
rm -rf "$work"
mkdir -p "$work"

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/mlaverify.h; do [ -f "$prefix/$f" ] || { echo "missing $prefix/$f"; exit 1; }; done
pc=$(find "$prefix" -name mlaverify.pc | head -n1)
cfg=$(find "$prefix" -name mlaverifyConfig.cmake | head -n1)
[ -n "$pc" ] && [ -n "$cfg" ] || { echo "no mlaverify.pc or mlaverifyConfig.cmake installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
ls "$libdir"/libmlaverify.so.* "$libdir"/libmlaverify.a > /dev/null
# the license everywhere it is installed: the .pc file, the CMake package, share/doc
grep -qx 'License: Apache-2.0' "$pc" || { echo "$pc: no License: Apache-2.0"; exit 1; }
grep -q 'mlaverify_LICENSE "Apache-2.0"' "$cfg" || { echo "$cfg: no mlaverify_LICENSE"; exit 1; }
grep -q 'Apache License' "$prefix"/share/doc/mlaverify/LICENSE || { echo "no share/doc/mlaverify/LICENSE"; exit 1; }
# the soname carries MAJOR.MINOR while the major version is 0 (CHANGELOG.md)
version=$(sed -n 's/^Version: //p' "$pc")
case "$version" in 0.*) want_soname=libmlaverify.so.${version%.*} ;; *) want_soname=libmlaverify.so.${version%%.*} ;; esac
if command -v readelf > /dev/null; then
  soname=$(readelf -d "$libdir/libmlaverify.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
  [ "$soname" = "$want_soname" ] || { echo "soname '$soname', expected $want_soname"; exit 1; }
  echo "== soname $soname, license Apache-2.0 in the .pc file, the CMake package and share/doc"
fi

# the binary must not load libmlaverify.so (static variants) / must (shared variants)
check_needed() {
  local exe=$1 want=$2 has=0
  if command -v readelf > /dev/null; then
    readelf -d "$exe" | grep -q "NEEDED.*\\[$want_soname\\]" && has=1
    if [ "$has" != "$want" ]; then
      echo "$exe: NEEDED libmlaverify is $has, expected $want"; readelf -d "$exe" | grep NEEDED; exit 1
    fi
  fi
}

for variant in shared static; do
  echo "== find_package, $variant"
  static=OFF; [ $variant = static ] && static=ON
  "$cmake" -S "$here" -B "$work/cmake-$variant" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" \
    -DCONSUMER_STATIC=$static -DCMAKE_BUILD_TYPE=Release > "$work/cmake-$variant.log" \
    || { cat "$work/cmake-$variant.log"; exit 1; }
  "$cmake" --build "$work/cmake-$variant"
  "$work/cmake-$variant/consumer"
  check_needed "$work/cmake-$variant/consumer" $([ $variant = shared ] && echo 1 || echo 0)
done

export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
echo "== pkg-config, shared: $(pkg-config --cflags --libs mlaverify)"
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra "$here/main.c" -o "$work/pc-shared" \
  $(pkg-config --cflags --libs mlaverify) -lm -Wl,-rpath,"$(pkg-config --variable=libdir mlaverify)"
"$work/pc-shared"
check_needed "$work/pc-shared" 1

# static: --static brings Libs.private; -l:libmlaverify.a picks the archive over the .so
libs=$(pkg-config --static --libs mlaverify | sed 's/-lmlaverify\b/-l:libmlaverify.a/')
echo "== pkg-config, static: $libs"
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra "$here/main.c" -o "$work/pc-static" \
  $(pkg-config --cflags mlaverify) $libs -lm
"$work/pc-static"
check_needed "$work/pc-static" 0
echo "install + consumer: all four builds ran"
